//! Which audit store `query`, `stats` and `timeline` read: a SQLite file (`--db`,
//! `--data-dir`, or ./data/audit.db), a PostgreSQL database (`--store
//! postgres://...`), or the store of a forwarder named in the gateway's configuration
//! (`--store NAME --config FILE`), read with that forwarder's own settings.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::CliError;
use super::query::StoreLocation;
use crate::config::{Config, ConfigError, describe_toml_error};
use crate::forward::postgres::PostgresOptions;
use crate::postgres::ConnectOptions;
use crate::postgres::connect::TlsMode;
use crate::query::StoreSpec;

#[derive(Debug, Args)]
pub struct StoreArgs {
    #[command(flatten)]
    pub file: StoreLocation,
    /// A PostgreSQL audit store (what a `postgres` forwarder writes):
    /// postgres://USER@HOST:PORT/DBNAME, TLS as --store-tls says, the password from
    /// --store-password-file or PGPASSWORD. Or the name of a `postgres` (or `sqlite`)
    /// forwarder in --config, read with that forwarder's url, password, tls and
    /// ca_file.
    #[arg(long, value_name = "URL|NAME", conflicts_with = "StoreLocation")]
    pub store: Option<String>,
    /// The configuration file whose forwarder --store names (the file `serve
    /// --config` reads).
    #[arg(long, value_name = "FILE", requires = "store")]
    pub config: Option<PathBuf>,
    /// TLS to a postgres:// --store: verify-full (the default: encrypted, the
    /// server's certificate checked against --store-ca or the system's roots, and its
    /// name against the host) or disable (plain TCP).
    #[arg(long, value_enum, value_name = "MODE", requires = "store")]
    pub store_tls: Option<StoreTls>,
    /// PEM certificates a postgres:// --store's certificate must chain to.
    #[arg(long, value_name = "FILE", requires = "store")]
    pub store_ca: Option<PathBuf>,
    /// A file holding a postgres:// --store's password (one line); without it,
    /// PGPASSWORD.
    #[arg(long, value_name = "FILE", requires = "store")]
    pub store_password_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StoreTls {
    VerifyFull,
    Disable,
}

/// How long connecting to a PostgreSQL store may take (a forwarder's default).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What a `--store` URL must not say itself, and the flag that says it instead.
const URL_KEYS: &[(&str, &str)] = &[
    ("sslmode", "--store-tls verify-full or --store-tls disable"),
    ("sslrootcert", "--store-ca"),
    ("password", "--store-password-file or PGPASSWORD"),
    ("sslcert", "nothing: client certificates are not supported"),
    ("sslkey", "nothing: client certificates are not supported"),
];

impl StoreArgs {
    /// The store to read. Reads the configuration file for `--store NAME`; connects
    /// to nothing.
    pub(super) fn resolve(&self) -> Result<StoreSpec, CliError> {
        let Some(store) = &self.store else {
            return Ok(StoreSpec::Sqlite(self.file.path()));
        };
        let usage = |problem: String| CliError::Usage(format!("--store {store:?}: {problem}"));
        if store.starts_with("postgres://") || store.starts_with("postgresql://") {
            if self.config.is_some() {
                return Err(usage(
                    "--config goes with a forwarder's name, not with a URL".to_owned(),
                ));
            }
            if let Some((key, instead)) = URL_KEYS.iter().find(|(key, _)| url_sets(store, key)) {
                return Err(usage(format!("the URL must not set {key}: use {instead}")));
            }
            let options = ConnectOptions {
                url: store.clone(),
                password_file: self.store_password_file.clone(),
                password_env: None,
                tls: match self.store_tls {
                    Some(StoreTls::Disable) => TlsMode::Disable,
                    Some(StoreTls::VerifyFull) | None => TlsMode::VerifyFull,
                },
                ca_file: self.store_ca.clone(),
                connect_timeout: CONNECT_TIMEOUT,
            };
            if self.store_ca.is_some() && self.store_tls == Some(StoreTls::Disable) {
                return Err(usage(
                    "--store-ca is set but --store-tls is disable: remove one".to_owned(),
                ));
            }
            let target = options.target().map_err(|e| usage(e.to_string()))?;
            return Ok(StoreSpec::Postgres(Box::new(target)));
        }
        if self.store_tls.is_some() || self.store_ca.is_some() || self.store_password_file.is_some()
        {
            return Err(usage(
                "--store-tls, --store-ca and --store-password-file go with a postgres:// URL; \
                 a forwarder is read with the settings the configuration gives it"
                    .to_owned(),
            ));
        }
        let Some(config) = &self.config else {
            return Err(usage(
                "neither a postgres:// URL nor, without --config, the name of a forwarder: \
                 give the configuration file that names it with --config (a SQLite file \
                 is read with --db)"
                    .to_owned(),
            ));
        };
        forwarder_store(config, store)
    }
}

/// Whether `url` sets the libpq parameter `key` (`?key=` or `&key=`), or, for the
/// password, holds one in its user part.
fn url_sets(url: &str, key: &str) -> bool {
    let (head, query) = url.split_once('?').unwrap_or((url, ""));
    if key == "password" {
        let authority = head
            .split_once("://")
            .map_or(head, |(_, rest)| rest)
            .split('/')
            .next()
            .unwrap_or_default();
        if authority
            .rsplit_once('@')
            .is_some_and(|(user, _)| user.contains(':'))
        {
            return true;
        }
    }
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .any(|(name, _)| name == key)
}

/// The store of the forwarder `name` in the configuration file `path`. Only the
/// forwarder's table is read and checked: a reader needs no signing key, upstream or
/// listener the file may also configure.
fn forwarder_store(path: &Path, name: &str) -> Result<StoreSpec, CliError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let config: Config = toml::from_str(&text).map_err(|error| ConfigError::Parse {
        origin: format!("in {}", path.display()),
        detail: describe_toml_error(&text, &error),
    })?;
    let stores = || {
        let names: Vec<String> = config
            .forwarders
            .iter()
            .filter(|f| f.kind == "postgres" || f.kind == "sqlite")
            .map(|f| format!("{:?} ({})", f.name, f.kind))
            .collect();
        match names.is_empty() {
            true => format!(
                "{} configures no postgres or sqlite forwarder",
                path.display()
            ),
            false => format!("the stores in {} are {}", path.display(), names.join(", ")),
        }
    };
    let Some(spec) = config.forwarders.iter().find(|f| f.name == name) else {
        return Err(CliError::Usage(format!(
            "--store {name:?}: no forwarder has that name; {}",
            stores()
        )));
    };
    let invalid = |problem: String| ConfigError::Forwarder {
        name: name.to_owned(),
        problem,
    };
    match spec.kind.as_str() {
        "postgres" => {
            let options =
                PostgresOptions::parse(&spec.options).map_err(|e| invalid(e.to_string()))?;
            let target = options
                .connect
                .target()
                .map_err(|e| invalid(e.to_string()))?;
            Ok(StoreSpec::Postgres(Box::new(target)))
        }
        // As the forwarder resolves it: relative to data_dir.
        "sqlite" => {
            let file = spec
                .options
                .get("path")
                .and_then(|p| p.as_str())
                .unwrap_or("audit.db");
            Ok(StoreSpec::Sqlite(config.data_dir.join(file)))
        }
        kind => Err(CliError::Usage(format!(
            "--store {name:?}: that forwarder is a {kind} forwarder, which keeps no store \
             to query; {}",
            stores()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_in_the_url_are_refused_for_their_flags() {
        assert!(url_sets("postgres://u@h/d?sslmode=disable", "sslmode"));
        assert!(url_sets(
            "postgres://u@h/d?a=b&sslrootcert=/x",
            "sslrootcert"
        ));
        assert!(url_sets("postgres://u:secret@h/d", "password"));
        assert!(url_sets("postgres://u@h/d?password=x", "password"));
        assert!(!url_sets("postgres://u@h:5432/d", "password"));
        assert!(!url_sets(
            "postgres://u@h/d?application_name=sslmode",
            "sslmode"
        ));
    }

    fn args(store: &str) -> StoreArgs {
        StoreArgs {
            file: StoreLocation {
                db: None,
                data_dir: None,
            },
            store: Some(store.to_owned()),
            config: None,
            store_tls: Some(StoreTls::Disable),
            store_ca: None,
            store_password_file: None,
        }
    }

    #[test]
    fn a_forwarder_is_found_by_name_with_its_settings() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("eventgate.toml");
        std::fs::write(
            &config,
            format!(
                "data_dir = \"{}\"\n\
                 [[forwarder]]\nname = \"audit\"\nkind = \"sqlite\"\npath = \"a.db\"\n\
                 [[forwarder]]\nname = \"central\"\nkind = \"postgres\"\n\
                 url = \"postgres://eg@db.example:6432/history\"\ntls = \"disable\"\n\
                 [[forwarder]]\nname = \"log\"\nkind = \"file\"\npath = \"x.jsonl\"\n",
                dir.path().display()
            ),
        )
        .unwrap();
        let named = |name: &str| {
            let mut a = args(name);
            a.store_tls = None;
            a.config = Some(config.clone());
            a.resolve()
        };
        match named("central").unwrap() {
            StoreSpec::Postgres(target) => {
                assert_eq!(target.describe(), "postgres://eg@db.example:6432/history")
            }
            other => panic!("{other:?}"),
        }
        match named("audit").unwrap() {
            StoreSpec::Sqlite(path) => assert_eq!(path, dir.path().join("a.db")),
            other => panic!("{other:?}"),
        }
        let error = named("log").unwrap_err().to_string();
        assert!(error.contains("file forwarder"), "{error}");
        assert!(error.contains(r#""central" (postgres)"#), "{error}");
        let error = named("nope").unwrap_err().to_string();
        assert!(error.contains("no forwarder has that name"), "{error}");

        let mut with_flags = args("central");
        with_flags.config = Some(config.clone());
        let error = with_flags.resolve().unwrap_err().to_string();
        assert!(error.contains("go with a postgres:// URL"), "{error}");
        let mut no_config = args("central");
        no_config.store_tls = None;
        let error = no_config.resolve().unwrap_err().to_string();
        assert!(error.contains("give the configuration file"), "{error}");
    }

    #[test]
    fn a_url_is_checked_before_connecting() {
        match args("postgres://eg@127.0.0.1:5432/h").resolve().unwrap() {
            StoreSpec::Postgres(target) => {
                assert_eq!(target.describe(), "postgres://eg@127.0.0.1:5432/h")
            }
            other => panic!("{other:?}"),
        }
        for (url, expected) in [
            ("postgres://eg@h/d?sslmode=disable", "--store-tls"),
            ("postgres://eg:pw@h/d", "PGPASSWORD"),
            ("postgres://h/d", "must name the user"),
        ] {
            let error = args(url).resolve().unwrap_err().to_string();
            assert!(error.contains(expected), "{url}: {error}");
        }
        let mut both = args("postgres://eg@h/d");
        both.store_ca = Some("/ca.pem".into());
        let error = both.resolve().unwrap_err().to_string();
        assert!(error.contains("remove one"), "{error}");
    }
}
