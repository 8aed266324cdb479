//! The store's port to its database: what the query modules may say to a connection, in types
//! of the store's own. A module binds [`ToSql`] values, reads a [`Row`] through [`FromSql`],
//! and runs statements through [`Conn`]; it never names a driver's type. SQLite implements the
//! port below (`impl Conn for rusqlite::Connection`); a second backend is one more `impl Conn`
//! and its own dialect of the few statements that differ, not a second copy of every query.
//!
//! The values are SQL's five storage classes. Both backends keep the same columns in them: an
//! id, a name, a time (RFC 3339 text, see `times.rs`), a state's word and a JSON document are
//! text; a count, a flag (0 or 1) and a duration are 64-bit integers.

use std::borrow::Cow;

/// An error a conversion returns, kept whole for the message.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What went wrong in a statement.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// A query that must return one row returned none.
    #[error("the query returned no row")]
    NoRows,
    /// A column's value is not what the store keeps there (a tampered row, or a value out of
    /// range for the type read).
    #[error("column {index}: {source}")]
    Column { index: usize, source: BoxError },
    /// A value that cannot be bound (a state's `unknown`, a count past 2^63).
    #[error("a bound value: {0}")]
    Bind(BoxError),
    /// The database refused or failed the statement.
    #[error(transparent)]
    Backend(anyhow::Error),
}

pub(crate) type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Column `index` holds a value the store cannot read as what it keeps there.
    pub(crate) fn column(index: usize, source: BoxError) -> Self {
        Self::Column { index, source }
    }
}

impl From<rusqlite::Error> for Error {
    fn from(err: rusqlite::Error) -> Self {
        match err {
            rusqlite::Error::QueryReturnedNoRows => Self::NoRows,
            rusqlite::Error::ToSqlConversionFailure(source) => Self::Bind(source),
            other => Self::Backend(other.into()),
        }
    }
}

/// One SQL value, bound or read. Text and blobs borrow where they can.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value<'a> {
    Null,
    Integer(i64),
    Real(f64),
    Text(Cow<'a, str>),
    Blob(Cow<'a, [u8]>),
}

impl Value<'_> {
    fn kind(&self) -> &'static str {
        match self {
            Self::Null => "NULL",
            Self::Integer(_) => "an integer",
            Self::Real(_) => "a real",
            Self::Text(_) => "text",
            Self::Blob(_) => "a blob",
        }
    }

    /// The text this value holds, or an error naming what it holds instead.
    pub(crate) fn as_str(&self) -> Result<&str, BoxError> {
        match self {
            Self::Text(text) => Ok(text),
            other => Err(format!("expected text, found {}", other.kind()).into()),
        }
    }

    fn as_i64(&self) -> Result<i64, BoxError> {
        match self {
            Self::Integer(n) => Ok(*n),
            other => Err(format!("expected an integer, found {}", other.kind()).into()),
        }
    }
}

/// A value a statement can bind.
pub(crate) trait ToSql {
    fn to_sql(&self) -> Result<Value<'_>, BoxError>;
}

/// A value a column can be read as.
pub(crate) trait FromSql: Sized {
    fn from_sql(value: Value<'_>) -> Result<Self, BoxError>;
}

/// The values a statement binds, in order (`?1`, `?2`, …).
pub(crate) type Params<'p> = &'p [&'p dyn ToSql];

/// The values a statement binds by name (`:name`).
pub(crate) type Named<'p> = &'p [(&'p str, &'p dyn ToSql)];

/// Positional parameters: `params![a, b]` is `&[&a, &b]` as [`Params`].
macro_rules! params {
    () => {
        &[] as &[&dyn $crate::sql::ToSql]
    };
    ($($param:expr),+ $(,)?) => {
        &[$(&$param as &dyn $crate::sql::ToSql),+] as &[&dyn $crate::sql::ToSql]
    };
}
pub(crate) use params;

/// One row of a result, read column by column.
pub(crate) struct Row<'r> {
    source: &'r dyn RowSource,
}

impl<'r> Row<'r> {
    pub(crate) fn new(source: &'r dyn RowSource) -> Self {
        Self { source }
    }

    /// Column `index` (from 0) as a `T`; an error names the column and what it held.
    pub(crate) fn get<T: FromSql>(&self, index: usize) -> Result<T> {
        let value = self.source.value(index)?;
        T::from_sql(value).map_err(|source| Error::Column { index, source })
    }
}

/// A backend's row.
pub(crate) trait RowSource {
    fn value(&self, index: usize) -> Result<Value<'_>>;
}

/// Which SQL a connection speaks, for the few statements the two backends spell differently.
/// Everything else is written once, in the SQL both accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Sqlite,
    Postgres,
}

impl Dialect {
    /// `column` is one of the texts in the JSON array bound as `param`.
    pub(crate) fn in_json_list(self, column: &str, param: &str) -> String {
        match self {
            Self::Sqlite => format!("{column} IN (SELECT value FROM json_each({param}))"),
            Self::Postgres => {
                format!("{column} IN (SELECT json_array_elements_text(CAST({param} AS json)))")
            }
        }
    }

    /// The text at `key` of the JSON object in `column`.
    pub(crate) fn json_text(self, column: &str, key: &str) -> String {
        match self {
            Self::Sqlite => format!("json_extract({column}, '$.{key}')"),
            Self::Postgres => format!("(CAST({column} AS json) ->> '{key}')"),
        }
    }

    /// The column that orders a table's rows as they were inserted (`hook_runs`,
    /// `cron_receipts`, `webhook_deliveries`): SQLite's rowid, PostgreSQL's `seq`.
    pub(crate) fn insertion_order(self) -> &'static str {
        match self {
            Self::Sqlite => "rowid",
            Self::Postgres => "seq",
        }
    }

    /// A row's physical handle, for deleting a batch of rows a subquery picked.
    pub(crate) fn row_handle(self) -> &'static str {
        match self {
            Self::Sqlite => "rowid",
            Self::Postgres => "ctid",
        }
    }

    /// What a query that reads rows to change them adds to lock them until the transaction
    /// ends. SQLite has one writer at a time: nothing.
    pub(crate) fn for_update(self) -> &'static str {
        match self {
            Self::Sqlite => "",
            Self::Postgres => " FOR UPDATE",
        }
    }

    /// [`Dialect::for_update`], skipping rows another transaction has locked instead of
    /// waiting for them (a claim: what one node claims, another passes over).
    pub(crate) fn skip_locked(self) -> &'static str {
        match self {
            Self::Sqlite => "",
            Self::Postgres => " FOR UPDATE SKIP LOCKED",
        }
    }

    /// What a transaction runs before it appends to the feed, when the backend needs it. On
    /// PostgreSQL several daemons append at once, each row's id taken from a sequence, so rows
    /// may commit out of the order of their ids. No lock orders them (one held to each
    /// commit made the daemons take turns: two were 1.25x one, 2.3x without it). Instead the
    /// transaction takes its transaction id before its first row's, which lets a reader tell
    /// a missing row that may still come from one that never will (see `Rd::feed_settled`);
    /// and its commit wakes every daemon's followers (`LISTEN canopy_feed`, see
    /// `pg::listen`).
    pub(crate) fn feed_append(self) -> Option<&'static str> {
        match self {
            Self::Sqlite => None,
            Self::Postgres => {
                Some("SELECT pg_current_xact_id()::text, pg_notify('canopy_feed', ?1)")
            }
        }
    }

    /// How a write transaction begins: SQLite takes its write lock at once (a batch never
    /// waits halfway), PostgreSQL locks rows as it writes them.
    pub(crate) fn begin_write(self) -> &'static str {
        match self {
            Self::Sqlite => "BEGIN IMMEDIATE",
            Self::Postgres => "BEGIN",
        }
    }

    /// How a read begins: one snapshot for everything the read does.
    pub(crate) fn begin_read(self) -> &'static str {
        match self {
            Self::Sqlite => "BEGIN DEFERRED",
            Self::Postgres => "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        }
    }
}

/// The port: a connection inside a transaction (the store begins, keeps and ends it), with
/// statements prepared once and cached by their text.
pub(crate) trait Conn {
    /// The SQL this connection speaks.
    fn dialect(&self) -> Dialect;
    /// Runs a statement; how many rows it changed.
    fn execute(&self, sql: &str, params: Params<'_>) -> Result<usize>;
    /// Runs a query, handing each row to `each` until it returns false or the rows end.
    fn query(
        &self,
        sql: &str,
        params: Params<'_>,
        each: &mut dyn FnMut(&Row<'_>) -> Result<bool>,
    ) -> Result<()>;
    /// [`Conn::query`] with parameters bound by name.
    fn query_named(
        &self,
        sql: &str,
        params: Named<'_>,
        each: &mut dyn FnMut(&Row<'_>) -> Result<bool>,
    ) -> Result<()>;
}

/// The ways a module reads results, over any [`Conn`].
pub(crate) trait Queries: Conn {
    /// The first row of a query, mapped; [`Error::NoRows`] when there is none.
    fn query_row<T>(
        &self,
        sql: &str,
        params: Params<'_>,
        map: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<T> {
        self.query_opt(sql, params, map)?.ok_or(Error::NoRows)
    }

    /// The first row of a query, mapped, if there is one.
    fn query_opt<T>(
        &self,
        sql: &str,
        params: Params<'_>,
        map: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<Option<T>> {
        let mut map = Some(map);
        let mut found = None;
        self.query(sql, params, &mut |row| {
            if let Some(map) = map.take() {
                found = Some(map(row)?);
            }
            Ok(false)
        })?;
        Ok(found)
    }

    /// Every row of a query, mapped, in order.
    fn query_map<T>(
        &self,
        sql: &str,
        params: Params<'_>,
        mut map: impl FnMut(&Row<'_>) -> Result<T>,
    ) -> Result<Vec<T>> {
        let mut all = Vec::new();
        self.query(sql, params, &mut |row| {
            all.push(map(row)?);
            Ok(true)
        })?;
        Ok(all)
    }

    /// [`Queries::query_map`] with parameters bound by name.
    fn query_map_named<T>(
        &self,
        sql: &str,
        params: Named<'_>,
        mut map: impl FnMut(&Row<'_>) -> Result<T>,
    ) -> Result<Vec<T>> {
        let mut all = Vec::new();
        self.query_named(sql, params, &mut |row| {
            all.push(map(row)?);
            Ok(true)
        })?;
        Ok(all)
    }
}

impl<C: Conn + ?Sized> Queries for C {}

// Binding.

impl<T: ToSql + ?Sized> ToSql for &T {
    fn to_sql(&self) -> Result<Value<'_>, BoxError> {
        (**self).to_sql()
    }
}

impl<T: ToSql + ?Sized> ToSql for Box<T> {
    fn to_sql(&self) -> Result<Value<'_>, BoxError> {
        (**self).to_sql()
    }
}

impl<T: ToSql> ToSql for Option<T> {
    fn to_sql(&self) -> Result<Value<'_>, BoxError> {
        match self {
            Some(value) => value.to_sql(),
            None => Ok(Value::Null),
        }
    }
}

impl ToSql for str {
    fn to_sql(&self) -> Result<Value<'_>, BoxError> {
        Ok(Value::Text(Cow::Borrowed(self)))
    }
}

impl ToSql for String {
    fn to_sql(&self) -> Result<Value<'_>, BoxError> {
        Ok(Value::Text(Cow::Borrowed(self)))
    }
}

impl ToSql for [u8] {
    fn to_sql(&self) -> Result<Value<'_>, BoxError> {
        Ok(Value::Blob(Cow::Borrowed(self)))
    }
}

impl ToSql for Vec<u8> {
    fn to_sql(&self) -> Result<Value<'_>, BoxError> {
        Ok(Value::Blob(Cow::Borrowed(self)))
    }
}

impl ToSql for bool {
    fn to_sql(&self) -> Result<Value<'_>, BoxError> {
        Ok(Value::Integer(i64::from(*self)))
    }
}

impl ToSql for f64 {
    fn to_sql(&self) -> Result<Value<'_>, BoxError> {
        Ok(Value::Real(*self))
    }
}

macro_rules! integers {
    ($($int:ty),*) => {$(
        impl ToSql for $int {
            fn to_sql(&self) -> Result<Value<'_>, BoxError> {
                i64::try_from(*self)
                    .map(Value::Integer)
                    .map_err(|_| format!("{self} is past the largest integer the store keeps (2^63 - 1)").into())
            }
        }

        impl FromSql for $int {
            fn from_sql(value: Value<'_>) -> Result<Self, BoxError> {
                let n = value.as_i64()?;
                <$int>::try_from(n).map_err(|_| format!("{n} is out of range for {}", stringify!($int)).into())
            }
        }
    )*};
}

integers!(i64, i32, u32, u16, u8, usize, u64);

// Reading.

impl<T: FromSql> FromSql for Option<T> {
    fn from_sql(value: Value<'_>) -> Result<Self, BoxError> {
        match value {
            Value::Null => Ok(None),
            value => T::from_sql(value).map(Some),
        }
    }
}

impl FromSql for String {
    fn from_sql(value: Value<'_>) -> Result<Self, BoxError> {
        match value {
            Value::Text(text) => Ok(text.into_owned()),
            other => Err(format!("expected text, found {}", other.kind()).into()),
        }
    }
}

impl FromSql for Vec<u8> {
    fn from_sql(value: Value<'_>) -> Result<Self, BoxError> {
        match value {
            Value::Blob(blob) => Ok(blob.into_owned()),
            Value::Text(text) => Ok(text.into_owned().into_bytes()),
            other => Err(format!("expected a blob, found {}", other.kind()).into()),
        }
    }
}

impl FromSql for bool {
    fn from_sql(value: Value<'_>) -> Result<Self, BoxError> {
        Ok(value.as_i64()? != 0)
    }
}

impl FromSql for f64 {
    fn from_sql(value: Value<'_>) -> Result<Self, BoxError> {
        match value {
            Value::Real(x) => Ok(x),
            #[allow(clippy::cast_precision_loss)]
            Value::Integer(n) => Ok(n as f64),
            other => Err(format!("expected a number, found {}", other.kind()).into()),
        }
    }
}

// SQLite, the embedded backend.

/// A bound value in rusqlite's terms.
struct Bind<'a>(&'a dyn ToSql);

impl rusqlite::ToSql for Bind<'_> {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, Value as Owned, ValueRef};
        let value = self
            .0
            .to_sql()
            .map_err(rusqlite::Error::ToSqlConversionFailure)?;
        Ok(match value {
            Value::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            Value::Integer(n) => ToSqlOutput::Borrowed(ValueRef::Integer(n)),
            Value::Real(x) => ToSqlOutput::Borrowed(ValueRef::Real(x)),
            Value::Text(Cow::Borrowed(text)) => {
                ToSqlOutput::Borrowed(ValueRef::Text(text.as_bytes()))
            }
            Value::Text(Cow::Owned(text)) => ToSqlOutput::Owned(Owned::Text(text)),
            Value::Blob(Cow::Borrowed(blob)) => ToSqlOutput::Borrowed(ValueRef::Blob(blob)),
            Value::Blob(Cow::Owned(blob)) => ToSqlOutput::Owned(Owned::Blob(blob)),
        })
    }
}

impl RowSource for rusqlite::Row<'_> {
    fn value(&self, index: usize) -> Result<Value<'_>> {
        use rusqlite::types::ValueRef;
        Ok(match self.get_ref(index)? {
            ValueRef::Null => Value::Null,
            ValueRef::Integer(n) => Value::Integer(n),
            ValueRef::Real(x) => Value::Real(x),
            ValueRef::Text(bytes) => Value::Text(Cow::Borrowed(
                std::str::from_utf8(bytes).map_err(|err| Error::Column {
                    index,
                    source: err.into(),
                })?,
            )),
            ValueRef::Blob(blob) => Value::Blob(Cow::Borrowed(blob)),
        })
    }
}

fn each_row(
    mut rows: rusqlite::Rows<'_>,
    each: &mut dyn FnMut(&Row<'_>) -> Result<bool>,
) -> Result<()> {
    while let Some(row) = rows.next()? {
        if !each(&Row::new(row))? {
            break;
        }
    }
    Ok(())
}

impl Conn for rusqlite::Connection {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn execute(&self, sql: &str, params: Params<'_>) -> Result<usize> {
        let bound = params.iter().map(|p| Bind(*p));
        Ok(self
            .prepare_cached(sql)?
            .execute(rusqlite::params_from_iter(bound))?)
    }

    fn query(
        &self,
        sql: &str,
        params: Params<'_>,
        each: &mut dyn FnMut(&Row<'_>) -> Result<bool>,
    ) -> Result<()> {
        let mut statement = self.prepare_cached(sql)?;
        let bound = params.iter().map(|p| Bind(*p));
        each_row(statement.query(rusqlite::params_from_iter(bound))?, each)
    }

    fn query_named(
        &self,
        sql: &str,
        params: Named<'_>,
        each: &mut dyn FnMut(&Row<'_>) -> Result<bool>,
    ) -> Result<()> {
        let mut statement = self.prepare_cached(sql)?;
        let bound: Vec<(&str, Bind<'_>)> = params
            .iter()
            .map(|(name, value)| (*name, Bind(*value)))
            .collect();
        let named: Vec<(&str, &dyn rusqlite::ToSql)> = bound
            .iter()
            .map(|(name, value)| (*name, value as &dyn rusqlite::ToSql))
            .collect();
        each_row(statement.query(named.as_slice())?, each)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::{Conn, Error, Queries};

    #[test]
    fn values_round_trip_and_a_wrong_column_type_names_the_column() {
        let sqlite = rusqlite::Connection::open_in_memory().unwrap();
        let conn: &dyn Conn = &sqlite;
        let (n, text, flag, none): (i64, String, bool, Option<String>) = conn
            .query_row(
                "SELECT ?1, ?2, ?3, ?4",
                params![7_i64, "seven", true, None::<String>],
                |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?)),
            )
            .unwrap();
        assert_eq!((n, text.as_str(), flag, none), (7, "seven", true, None));
        let err = conn
            .query_row("SELECT 1, 'x'", params![], |row| row.get::<i64>(1))
            .unwrap_err();
        assert!(matches!(&err, Error::Column { index: 1, .. }), "{err:?}");
        assert!(
            err.to_string().contains("expected an integer, found text"),
            "{err}"
        );
        let missing = conn.query_row("SELECT 1 WHERE 0", params![], |row| row.get::<i64>(0));
        assert!(matches!(missing, Err(Error::NoRows)));
    }

    #[test]
    fn a_count_past_the_largest_integer_is_refused_not_wrapped() {
        let sqlite = rusqlite::Connection::open_in_memory().unwrap();
        let conn: &dyn Conn = &sqlite;
        let err = conn
            .query_row("SELECT ?1", params![u64::MAX], |row| row.get::<i64>(0))
            .unwrap_err();
        assert!(matches!(&err, Error::Bind(_)), "{err:?}");
        assert!(err.to_string().contains("2^63"), "{err}");
        let err = conn
            .query_row("SELECT -1", params![], |row| row.get::<u32>(0))
            .unwrap_err();
        assert!(err.to_string().contains("out of range for u32"), "{err}");
    }
}
