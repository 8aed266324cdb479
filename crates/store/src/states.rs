//! How the store keeps a state (a [`canopy_model::states::State`]): as its word. A row whose
//! word is not one the state knows is an error, and so is writing `Unknown` (the value a client
//! reads for a newer daemon's word; this store never keeps it).

use canopy_model::states::State;
use rusqlite::Row;
use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};

/// A state as a SQL value: its word.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sql<T>(pub T);

impl<T: State> ToSql for Sql<T> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        if self.0.is_unknown() {
            return Err(rusqlite::Error::ToSqlConversionFailure(
                "the state `unknown` is never stored".into(),
            ));
        }
        Ok(self.0.as_str().into())
    }
}

impl<T: State> FromSql for Sql<T> {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        value
            .as_str()?
            .parse()
            .map(Sql)
            .map_err(|err: String| FromSqlError::Other(err.into()))
    }
}

/// The state in column `index` of `row`.
pub(crate) fn state<T: State>(row: &Row<'_>, index: usize) -> rusqlite::Result<T> {
    row.get::<_, Sql<T>>(index).map(|value| value.0)
}

/// The state in column `index` of `row`, if it is not NULL.
pub(crate) fn state_opt<T: State>(row: &Row<'_>, index: usize) -> rusqlite::Result<Option<T>> {
    row.get::<_, Option<Sql<T>>>(index)
        .map(|value| value.map(|v| v.0))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use canopy_model::records::runs::RunStatus;
    use rusqlite::types::ToSql;

    use super::{Sql, state};

    #[test]
    fn unknown_is_never_written_and_a_tampered_word_is_refused_naming_the_allowed_ones() {
        assert!(Sql(RunStatus::Unknown).to_sql().is_err());
        assert!(Sql(RunStatus::Paused).to_sql().is_ok());
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        for word in ["unknown", "bogus", ""] {
            let err = conn
                .query_row("SELECT ?1", [word], |row| state::<RunStatus>(row, 0))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("is not one of running, paused"),
                "{word}: {err}"
            );
        }
        let read = conn
            .query_row("SELECT 'interrupted'", [], |row| state::<RunStatus>(row, 0))
            .unwrap();
        assert_eq!(read, RunStatus::Interrupted);
    }
}
