//! Which SQLite failures are worth retrying. The rule: if the database is busy,
//! full, unreachable or broken, the same batch may go in later (and nothing of it
//! was kept, the transaction rolled back); if the rows themselves are refused, no
//! retry can help.

use rusqlite::ErrorCode;

use crate::forward::ErrorKind;

pub(crate) fn classify(error: &rusqlite::Error) -> ErrorKind {
    let Some(code) = error.sqlite_error_code() else {
        // Binding failed before SQLite saw the row (a value out of SQLite's range).
        return ErrorKind::Permanent;
    };
    match code {
        // The rows: a constraint other than the id conflict (handled in the INSERT),
        // a value too large for SQLite's limits, a type the schema rejects.
        ErrorCode::ConstraintViolation | ErrorCode::TooBig | ErrorCode::TypeMismatch => {
            ErrorKind::Permanent
        }
        // The database: locked by another connection, disk full, I/O failures, a
        // read-only or vanished file, corruption an operator may repair. Retrying
        // keeps the events queued instead of dropping them.
        _ => ErrorKind::Retryable,
    }
}

#[cfg(test)]
mod tests {
    use rusqlite::ffi;

    use super::*;

    fn failure(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(ffi::Error::new(code), None)
    }

    #[test]
    fn database_conditions_are_retryable_row_problems_are_not() {
        let retryable = [
            ffi::SQLITE_BUSY,
            ffi::SQLITE_LOCKED,
            ffi::SQLITE_FULL,
            ffi::SQLITE_IOERR,
            ffi::SQLITE_IOERR_FSYNC,
            ffi::SQLITE_IOERR_WRITE,
            ffi::SQLITE_READONLY,
            ffi::SQLITE_CANTOPEN,
            ffi::SQLITE_CORRUPT,
        ];
        for code in retryable {
            assert_eq!(classify(&failure(code)), ErrorKind::Retryable, "{code}");
        }
        let permanent = [
            ffi::SQLITE_CONSTRAINT_NOTNULL,
            ffi::SQLITE_CONSTRAINT_CHECK,
            ffi::SQLITE_CONSTRAINT_TRIGGER,
            ffi::SQLITE_TOOBIG,
            ffi::SQLITE_MISMATCH,
        ];
        for code in permanent {
            assert_eq!(classify(&failure(code)), ErrorKind::Permanent, "{code}");
        }
        let unbindable = rusqlite::Error::ToSqlConversionFailure("u64 out of range".into());
        assert_eq!(classify(&unbindable), ErrorKind::Permanent);
    }
}
