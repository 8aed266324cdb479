//! PostgreSQL's side of the port: a connection that takes the store's statements as the
//! modules write them (`?1` and `:name` parameters), binds the store's values to the types
//! PostgreSQL inferred for them, and reads its rows back as the store's values.

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::HashMap;

use bytes::BytesMut;
use postgres::types::{IsNull, ToSql as PgToSql, Type, to_sql_checked};
use postgres::{Client, Statement};

use super::Target;
use crate::sql::{BoxError, Conn, Dialect, Error, Named, Params, Result, Row, RowSource, Value};

/// A statement as PostgreSQL was given it, and the names of its `:name` parameters in the
/// order of their `$n`.
struct Prepared {
    statement: Statement,
    names: Vec<String>,
}

/// One connection, inside a transaction the store begins and ends, with its statements
/// prepared once and kept by their text.
pub(crate) struct PgConn {
    target: Target,
    /// `None` only while the connection is dropped (see `Drop`).
    client: RefCell<Option<Client>>,
    prepared: RefCell<HashMap<String, Prepared>>,
    /// The node whose lock this connection holds (see [`PgConn::hold_node_lock`]).
    node_lock: Option<String>,
}

/// How long [`PgConn::heal`] waits for a connection to answer before it connects again.
const HEAL_PROBE: std::time::Duration = std::time::Duration::from_secs(2);

/// The class of the session locks daemons hold on their writer's connection, one per node
/// name ("cnpy"); the node name's hash is the lock's other half.
const NODE_LOCK: i32 = 0x636e_7079;

impl PgConn {
    pub(crate) fn connect(target: Target) -> anyhow::Result<Self> {
        let client = target.connect()?;
        Ok(Self {
            target,
            client: RefCell::new(Some(client)),
            prepared: RefCell::new(HashMap::new()),
            node_lock: None,
        })
    }

    /// Takes the lock of node `node` for as long as this connection lives; false when another
    /// daemon's connection holds it: two daemons of one name would claim each other's work.
    pub(crate) fn hold_node_lock(&mut self, node: &str) -> Result<bool> {
        use crate::sql::{Queries, params};
        let held: bool = self.query_row(
            "SELECT pg_try_advisory_lock(?1::int4, hashtext(?2))",
            params![i64::from(NODE_LOCK), node],
            |row| row.get(0),
        )?;
        if held {
            self.node_lock = Some(node.to_string());
        }
        Ok(held)
    }

    /// After a statement failed: when the server has gone (a restart, a dropped link),
    /// connects again, once. The statements prepared on the old connection are forgotten.
    pub(crate) fn heal(&mut self) {
        // A connection the server is ending (`pg_terminate_backend`, a restart) may not be
        // seen closed yet when its first statement fails: it is asked, briefly, whether it
        // still answers.
        if self
            .client
            .get_mut()
            .as_mut()
            .is_some_and(|c| !c.is_closed() && c.is_valid(HEAL_PROBE).is_ok())
        {
            return;
        }
        match self.target.connect() {
            Ok(client) => {
                tracing::warn!(database = %self.target, "connected to PostgreSQL again");
                *self.client.get_mut() = Some(client);
                self.prepared.get_mut().clear();
                if let Some(node) = self.node_lock.clone()
                    && !matches!(self.hold_node_lock(&node), Ok(true))
                {
                    tracing::error!(
                        database = %self.target,
                        node,
                        "another daemon of this node name took its lock while the connection was down"
                    );
                }
            }
            Err(err) => tracing::error!(error = %err, "cannot connect to PostgreSQL again"),
        }
    }

    /// Runs statements that take no parameters and return nothing (a transaction's begin
    /// and end, the schema).
    pub(crate) fn batch(&self, sql: &str) -> Result<()> {
        self.with_client(|client| client.batch_execute(sql))
    }

    /// Runs `work` on the client.
    fn with_client<T>(
        &self,
        work: impl FnOnce(&mut Client) -> std::result::Result<T, postgres::Error>,
    ) -> Result<T> {
        match self.client.borrow_mut().as_mut() {
            Some(client) => work(client).map_err(backend),
            None => Err(Error::Backend(anyhow::anyhow!("the connection is closed"))),
        }
    }

    fn prepare(&self, sql: &str) -> Result<(Statement, Vec<String>)> {
        if let Some(found) = self.prepared.borrow().get(sql) {
            return Ok((found.statement.clone(), found.names.clone()));
        }
        let (text, names) = to_postgres(sql);
        let statement = self
            .with_client(|client| client.prepare(&text))
            .map_err(|err| Error::Backend(anyhow::Error::new(err).context(text.clone())))?;
        self.prepared.borrow_mut().insert(
            sql.to_string(),
            Prepared {
                statement: statement.clone(),
                names: names.clone(),
            },
        );
        Ok((statement, names))
    }

    /// Runs a prepared query over `values`, handing each row to `each`.
    fn run(
        &self,
        statement: &Statement,
        values: Vec<Value<'_>>,
        each: &mut dyn FnMut(&Row<'_>) -> Result<bool>,
    ) -> Result<()> {
        let statement = statement.clone();
        let bound = bind(&statement, values)?;
        let rows = self.with_client(|client| client.query(&statement, &refs(&bound)))?;
        for row in &rows {
            if !each(&Row::new(&PgRow(row)))? {
                break;
            }
        }
        Ok(())
    }
}

/// The client runs a runtime of its own, which closing it drives: on a tokio runtime's thread
/// that would panic, so there it is closed on a thread of its own.
impl Drop for PgConn {
    fn drop(&mut self) {
        let Some(client) = self.client.get_mut().take() else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            let _ = std::thread::Builder::new()
                .name("canopy-store-pg-close".into())
                .spawn(move || drop(client));
        }
    }
}

fn backend(err: postgres::Error) -> Error {
    Error::Backend(err.into())
}

/// The store's values, in order, for a statement's `$n`.
fn bind<'v>(statement: &Statement, values: Vec<Value<'v>>) -> Result<Vec<PgValue<'v>>> {
    if values.len() != statement.params().len() {
        return Err(Error::Bind(
            format!(
                "the statement takes {} values, {} were given",
                statement.params().len(),
                values.len()
            )
            .into(),
        ));
    }
    Ok(values.into_iter().map(PgValue).collect())
}

/// The bound values as the client takes them.
fn refs<'b>(bound: &'b [PgValue<'_>]) -> Vec<&'b (dyn PgToSql + Sync)> {
    bound.iter().map(|b| b as &(dyn PgToSql + Sync)).collect()
}

fn values<'p>(params: Params<'p>) -> Result<Vec<Value<'p>>> {
    params
        .iter()
        .map(|param| param.to_sql().map_err(Error::Bind))
        .collect()
}

impl Conn for PgConn {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn execute(&self, sql: &str, params: Params<'_>) -> Result<usize> {
        let (statement, _) = self.prepare(sql)?;
        let bound = bind(&statement, values(params)?)?;
        let changed = self.with_client(|client| client.execute(&statement, &refs(&bound)))?;
        Ok(usize::try_from(changed).unwrap_or(usize::MAX))
    }

    fn query(
        &self,
        sql: &str,
        params: Params<'_>,
        each: &mut dyn FnMut(&Row<'_>) -> Result<bool>,
    ) -> Result<()> {
        let (statement, _) = self.prepare(sql)?;
        self.run(&statement, values(params)?, each)
    }

    fn query_named(
        &self,
        sql: &str,
        params: Named<'_>,
        each: &mut dyn FnMut(&Row<'_>) -> Result<bool>,
    ) -> Result<()> {
        let (statement, names) = self.prepare(sql)?;
        let mut ordered = Vec::with_capacity(names.len());
        for name in &names {
            let Some((_, value)) = params.iter().find(|(given, _)| given[1..] == **name) else {
                return Err(Error::Bind(format!("no value for :{name}").into()));
            };
            ordered.push(value.to_sql().map_err(Error::Bind)?);
        }
        self.run(&statement, ordered, each)
    }
}

/// A statement in PostgreSQL's terms: `?N` becomes `$N`, and each distinct `:name` becomes
/// the next `$n` (returned in order). Quoted text and `::` casts are left as they are.
pub(crate) fn to_postgres(sql: &str) -> (String, Vec<String>) {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut names: Vec<String> = Vec::new();
    let bytes = sql.as_bytes();
    let mut i = 0;
    let mut quote: Option<u8> = None;
    while i < bytes.len() {
        let c = bytes[i];
        if let Some(q) = quote {
            if c == q {
                quote = None;
            }
            let width = utf8_width(c);
            out.push_str(&sql[i..i + width]);
            i += width;
            continue;
        }
        match c {
            b'\'' | b'"' => {
                quote = Some(c);
                out.push(char::from(c));
                i += 1;
            }
            b'?' => {
                out.push('$');
                i += 1;
            }
            b':' if bytes.get(i + 1) == Some(&b':') => {
                out.push_str("::");
                i += 2;
            }
            b':' if bytes
                .get(i + 1)
                .is_some_and(|n| n.is_ascii_alphabetic() || *n == b'_') =>
            {
                let start = i + 1;
                let mut end = start;
                while end < bytes.len()
                    && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_')
                {
                    end += 1;
                }
                let name = &sql[start..end];
                let index = match names.iter().position(|n| n == name) {
                    Some(index) => index,
                    None => {
                        names.push(name.to_string());
                        names.len() - 1
                    }
                };
                out.push('$');
                out.push_str(&(index + 1).to_string());
                i = end;
            }
            _ => {
                // Copy the whole UTF-8 character.
                let width = utf8_width(c);
                out.push_str(&sql[i..i + width]);
                i += width;
            }
        }
    }
    (out, names)
}

fn utf8_width(first: u8) -> usize {
    match first {
        0..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        _ => 4,
    }
}

/// A store value bound to the type PostgreSQL inferred for its parameter.
#[derive(Debug)]
struct PgValue<'a>(Value<'a>);

impl PgToSql for PgValue<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> std::result::Result<IsNull, BoxError> {
        let mismatch = || -> BoxError {
            format!("cannot bind {:?} to a parameter of type {ty}", self.0).into()
        };
        match &self.0 {
            Value::Null => Ok(IsNull::Yes),
            Value::Integer(n) => match *ty {
                Type::INT8 => n.to_sql(ty, out),
                Type::INT4 => i32::try_from(*n)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(*n)?.to_sql(ty, out),
                Type::BOOL => (*n != 0).to_sql(ty, out),
                #[allow(clippy::cast_precision_loss)]
                Type::FLOAT8 => (*n as f64).to_sql(ty, out),
                Type::TEXT | Type::VARCHAR | Type::UNKNOWN => n.to_string().to_sql(ty, out),
                _ => Err(mismatch()),
            },
            Value::Real(x) => match *ty {
                Type::FLOAT8 => x.to_sql(ty, out),
                _ => Err(mismatch()),
            },
            // PostgreSQL's text cannot hold a NUL. No name or id Canopy keeps may (the API
            // refuses one at the door); what reaches here is free text a process or a plugin
            // produced (its output, its error), kept as it would be shown: each NUL as U+FFFD,
            // as undecodable bytes are.
            Value::Text(text) if text.contains('\0') => {
                PgValue(Value::Text(text.replace('\0', "\u{FFFD}").into())).to_sql(ty, out)
            }
            Value::Text(text) => match *ty {
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                    text.as_ref().to_sql(ty, out)
                }
                Type::JSON => {
                    out.extend_from_slice(text.as_bytes());
                    Ok(IsNull::No)
                }
                _ => Err(mismatch()),
            },
            Value::Blob(blob) => match *ty {
                Type::BYTEA => blob.as_ref().to_sql(ty, out),
                _ => Err(mismatch()),
            },
        }
    }

    fn accepts(_: &Type) -> bool {
        // Checked per value in `to_sql`, naming the type.
        true
    }

    to_sql_checked!();
}

/// A PostgreSQL row, read as the store's values.
struct PgRow<'r>(&'r postgres::Row);

impl RowSource for PgRow<'_> {
    fn value(&self, index: usize) -> Result<Value<'_>> {
        let row = self.0;
        let Some(column) = row.columns().get(index) else {
            return Err(Error::column(index, "no such column".into()));
        };
        let wrong = |err: postgres::Error| Error::column(index, err.into());
        let value = match *column.type_() {
            Type::INT8 => row
                .try_get::<_, Option<i64>>(index)
                .map_err(wrong)?
                .map(Value::Integer),
            Type::INT4 => row
                .try_get::<_, Option<i32>>(index)
                .map_err(wrong)?
                .map(|n| Value::Integer(i64::from(n))),
            Type::INT2 => row
                .try_get::<_, Option<i16>>(index)
                .map_err(wrong)?
                .map(|n| Value::Integer(i64::from(n))),
            Type::BOOL => row
                .try_get::<_, Option<bool>>(index)
                .map_err(wrong)?
                .map(|b| Value::Integer(i64::from(b))),
            Type::FLOAT8 => row
                .try_get::<_, Option<f64>>(index)
                .map_err(wrong)?
                .map(Value::Real),
            Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => row
                .try_get::<_, Option<&str>>(index)
                .map_err(wrong)?
                .map(|text| Value::Text(Cow::Borrowed(text))),
            Type::BYTEA => row
                .try_get::<_, Option<&[u8]>>(index)
                .map_err(wrong)?
                .map(|blob| Value::Blob(Cow::Borrowed(blob))),
            ref other => {
                return Err(Error::column(
                    index,
                    format!("PostgreSQL type {other} is not one the store reads").into(),
                ));
            }
        };
        Ok(value.unwrap_or(Value::Null))
    }
}

#[cfg(test)]
mod tests {
    use super::to_postgres;

    #[test]
    fn parameters_are_renumbered_and_quotes_and_casts_kept() {
        assert_eq!(
            to_postgres("SELECT ?1, ?12 FROM t WHERE a = ?2"),
            ("SELECT $1, $12 FROM t WHERE a = $2".to_string(), vec![])
        );
        let (text, names) = to_postgres(
            "SELECT ':no', x::json FROM t WHERE a = :after AND b = :limit OR c = :after LIMIT :limit",
        );
        assert_eq!(
            text,
            "SELECT ':no', x::json FROM t WHERE a = $1 AND b = $2 OR c = $1 LIMIT $2"
        );
        assert_eq!(names, ["after", "limit"]);
        assert_eq!(to_postgres("SELECT 'é?' || ?1").0, "SELECT 'é?' || $1");
    }
}
