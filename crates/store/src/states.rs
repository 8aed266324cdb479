//! How the store keeps a state (a [`canopy_model::states::State`]): as its word. A row whose
//! word is not one the state knows is an error, and so is writing `Unknown` (the value a client
//! reads for a newer daemon's word; this store never keeps it).

use canopy_model::states::State;

use crate::sql::{self, BoxError, FromSql, Row, ToSql, Value};

/// A state as a SQL value: its word.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sql<T>(pub T);

impl<T: State> ToSql for Sql<T> {
    fn to_sql(&self) -> Result<Value<'_>, BoxError> {
        if self.0.is_unknown() {
            return Err("the state `unknown` is never stored".into());
        }
        Ok(Value::Text(self.0.as_str().into()))
    }
}

impl<T: State> FromSql for Sql<T> {
    fn from_sql(value: Value<'_>) -> Result<Self, BoxError> {
        value.as_str()?.parse().map(Sql).map_err(BoxError::from)
    }
}

/// The state in column `index` of `row`.
pub(crate) fn state<T: State>(row: &Row<'_>, index: usize) -> sql::Result<T> {
    row.get::<Sql<T>>(index).map(|value| value.0)
}

/// The state in column `index` of `row`, if it is not NULL.
pub(crate) fn state_opt<T: State>(row: &Row<'_>, index: usize) -> sql::Result<Option<T>> {
    row.get::<Option<Sql<T>>>(index)
        .map(|value| value.map(|v| v.0))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use crate::sql::{Conn, Queries, ToSql, params};
    use canopy_model::records::runs::RunStatus;

    use super::{Sql, state};

    #[test]
    fn unknown_is_never_written_and_a_tampered_word_is_refused_naming_the_allowed_ones() {
        assert!(Sql(RunStatus::Unknown).to_sql().is_err());
        assert!(Sql(RunStatus::Paused).to_sql().is_ok());
        let sqlite = rusqlite::Connection::open_in_memory().unwrap();
        let conn: &dyn Conn = &sqlite;
        for word in ["unknown", "bogus", ""] {
            let err = conn
                .query_row("SELECT ?1", params![word], |row| state::<RunStatus>(row, 0))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("is not one of running, paused"),
                "{word}: {err}"
            );
        }
        let read = conn
            .query_row("SELECT 'interrupted'", params![], |row| {
                state::<RunStatus>(row, 0)
            })
            .unwrap();
        assert_eq!(read, RunStatus::Interrupted);
    }
}
