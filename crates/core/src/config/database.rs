//! Where the daemon keeps its state (`[database]`): SQLite in the data dir, unless a
//! PostgreSQL database is named.
//!
//! ```toml
//! [database]
//! url_env = "CANOPY_DATABASE_URL"   # the variable that holds postgres://user:password@host/db
//! # url = "postgres://canopy@db.internal/canopy"   # or the string itself, when it holds no secret
//! lease_secs = 15   # how long a daemon's claim on a run lasts without its heartbeat
//! ```
//!
//! `canopy daemon --database URL` and the `CANOPY_DATABASE_URL` variable name one as well;
//! the flag wins, then the variable, then this section.

use canopy_model::text::is_env_name;
use serde::Deserialize;

/// The variable a daemon reads its database from when neither `--database` nor `[database]`
/// names one.
pub const DATABASE_ENV: &str = "CANOPY_DATABASE_URL";

/// `[database]` as written.
#[derive(Debug, Clone, Deserialize, Default, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct DatabaseConfig {
    /// A PostgreSQL connection string.
    pub url: Option<String>,
    /// The environment variable that holds one (a password stays out of the file).
    pub url_env: Option<String>,
    /// How long a daemon's lease on a run it drives lasts without a heartbeat (renewed every
    /// third of it): after a daemon dies, another daemon on the database takes its runs over
    /// within about this long. Default [`DEFAULT_LEASE_SECS`].
    pub lease_secs: Option<u64>,
}

/// The lease a daemon holds on a run it drives, unless `[database] lease_secs` says otherwise.
pub const DEFAULT_LEASE_SECS: u64 = 15;

/// The database a daemon runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Database {
    /// `canopy.db` in the data dir.
    Sqlite,
    /// A PostgreSQL database; the string may hold a password and is never shown.
    Postgres { url: String, shown: String },
}

impl DatabaseConfig {
    /// The section's problems, each naming its key.
    pub fn check(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.url.is_some() && self.url_env.is_some() {
            problems.push("database: give `url` or `url_env`, not both".to_string());
        }
        if let Some(url) = &self.url
            && let Err(err) = canopy_store::pg::describe(url)
        {
            problems.push(format!("database.url: {err}"));
        }
        if let Some(secs) = self.lease_secs
            && !(2..=600).contains(&secs)
        {
            problems.push(format!(
                "database.lease_secs: must be from 2 to 600 (seconds), got {secs}"
            ));
        }
        if let Some(name) = &self.url_env
            && !is_env_name(name)
        {
            problems.push(format!(
                "database.url_env: `{name}` is not an environment variable name (letters, digits and `_`, not starting with a digit)"
            ));
        }
        problems
    }

    /// How long a lease on a run lasts without a heartbeat.
    pub fn lease(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.lease_secs.unwrap_or(DEFAULT_LEASE_SECS))
    }

    /// The database to run on: `flag` (`--database`), else [`DATABASE_ENV`], else this
    /// section, else SQLite. `env` reads a variable (the process's, in the daemon).
    pub fn resolve(
        &self,
        flag: Option<&str>,
        env: impl Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Database> {
        let (url, from) = if let Some(url) = flag {
            (url.to_string(), "--database".to_string())
        } else if let Some(url) = env(DATABASE_ENV).filter(|u| !u.is_empty()) {
            (url, DATABASE_ENV.to_string())
        } else if let Some(url) = &self.url {
            (url.clone(), "database.url".to_string())
        } else if let Some(name) = &self.url_env {
            let Some(url) = env(name).filter(|u| !u.is_empty()) else {
                anyhow::bail!(
                    "database.url_env names `{name}`, which is not set in the daemon's environment"
                );
            };
            (url, format!("database.url_env ({name})"))
        } else {
            return Ok(Database::Sqlite);
        };
        let shown =
            canopy_store::pg::describe(&url).map_err(|err| anyhow::anyhow!("{from}: {err}"))?;
        Ok(Database::Postgres { url, shown })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn the_flag_wins_then_the_variable_then_the_section_and_no_error_shows_a_password() {
        let section = DatabaseConfig {
            url: None,
            url_env: Some("DB".into()),
            lease_secs: None,
        };
        let secret = "postgres://canopy:hunter2@db.internal:6543/work";
        assert_eq!(
            section.resolve(None, env(&[("DB", secret)])).unwrap(),
            Database::Postgres {
                url: secret.into(),
                shown: "canopy@db.internal:6543/work".into()
            }
        );
        let flag = "host=/run/pg user=me dbname=mine";
        assert!(matches!(
            section.resolve(Some(flag), env(&[("DB", secret)])).unwrap(),
            Database::Postgres { shown, .. } if shown == "me@/run/pg:5432/mine"
        ));
        assert!(matches!(
            section.resolve(None, env(&[(DATABASE_ENV, flag), ("DB", secret)])).unwrap(),
            Database::Postgres { url, .. } if url == flag
        ));
        let unset = section.resolve(None, env(&[])).unwrap_err().to_string();
        assert!(
            unset.contains("`DB`") && unset.contains("not set"),
            "{unset}"
        );
        let bad = "postgres://canopy:hunter2@[::1";
        let err = DatabaseConfig::default()
            .resolve(Some(bad), env(&[]))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("--database:") && !err.contains("hunter2"),
            "{err}"
        );
        assert_eq!(
            DatabaseConfig::default().resolve(None, env(&[])).unwrap(),
            Database::Sqlite
        );
        let both = DatabaseConfig {
            url: Some(flag.into()),
            url_env: Some("not a name".into()),
            lease_secs: Some(1),
        };
        let problems = both.check().join("\n");
        assert!(
            problems.contains("not both")
                && problems.contains("database.url_env")
                && problems.contains("database.lease_secs: must be from 2 to 600 (seconds), got 1"),
            "{problems}"
        );
    }
}
