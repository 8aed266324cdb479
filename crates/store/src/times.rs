//! How the store keeps a [`Timestamp`]: as its text (RFC 3339, UTC, six fractional digits), a
//! fixed width, so `ORDER BY` and `<` on the column follow time. A row whose text is not an
//! RFC 3339 instant is an error naming the text.

use canopy_model::time::Timestamp;

use crate::sql::{self, BoxError, FromSql, Row, ToSql, Value};

/// A timestamp as a SQL value: its text.
#[derive(Debug, Clone, Copy)]
pub(crate) struct At(pub Timestamp);

impl ToSql for At {
    fn to_sql(&self) -> Result<Value<'_>, BoxError> {
        Ok(Value::Text(self.0.to_string().into()))
    }
}

impl FromSql for At {
    fn from_sql(value: Value<'_>) -> Result<Self, BoxError> {
        Ok(At(value.as_str()?.parse()?))
    }
}

/// The timestamp in column `index` of `row`.
pub(crate) fn time(row: &Row<'_>, index: usize) -> sql::Result<Timestamp> {
    row.get::<At>(index).map(|at| at.0)
}

/// The timestamp in column `index` of `row`, if it is not NULL.
pub(crate) fn time_opt(row: &Row<'_>, index: usize) -> sql::Result<Option<Timestamp>> {
    row.get::<Option<At>>(index).map(|at| at.map(|at| at.0))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::{At, time, time_opt};
    use crate::sql::{Conn, Queries, params};

    #[test]
    fn a_timestamp_round_trips_as_fixed_width_text_and_a_tampered_one_is_refused() {
        let sqlite = rusqlite::Connection::open_in_memory().unwrap();
        let conn: &dyn Conn = &sqlite;
        let at: canopy_model::time::Timestamp = "2026-12-07T08:48:39Z".parse().unwrap();
        let text: String = conn
            .query_row("SELECT ?1", params![At(at)], |row| row.get(0))
            .unwrap();
        assert_eq!(text, "2026-12-07T08:48:39.000000Z");
        let back = conn
            .query_row("SELECT ?1", params![text], |row| time(row, 0))
            .unwrap();
        assert_eq!(back, at);
        let none = conn
            .query_row("SELECT NULL", params![], |row| time_opt(row, 0))
            .unwrap();
        assert_eq!(none, None);
        let err = conn
            .query_row("SELECT 'last tuesday'", params![], |row| time(row, 0))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("last tuesday") && err.contains("RFC 3339"),
            "{err}"
        );
    }
}
