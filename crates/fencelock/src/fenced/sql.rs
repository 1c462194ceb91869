//! The fencing check for SQL stores: one conditional `UPDATE`.

use super::FencedWrite;
use crate::error::InputError;

/// How the statement writes its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Placeholders {
    /// `$1`, `$2`, … (PostgreSQL): the token is bound once and used twice.
    #[default]
    Numbered,
    /// `?` (MySQL, SQLite): every use is bound, so the token is bound twice.
    Question,
}

/// One parameter of the statement, in the order they are bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Param {
    /// The new value of the `n`th column given to [`FencedUpdate::new`] (from 0).
    Value(usize),
    /// The writer's fencing token, from [`FencedUpdate::token`].
    Token,
    /// The row's id.
    Id,
}

/// A fenced `UPDATE` for a SQL table: it changes the row only if the writer's fencing token
/// is at least the one the row recorded, and records the token.
///
/// ```text
/// UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2
/// ```
///
/// The table needs a `BIGINT NOT NULL DEFAULT 0` column for the token (`fence` unless
/// [`FencedUpdate::fence_column`] names another). When no row matched, the write was
/// rejected: the token was older than the row's (the writer lost the lock to a later holder),
/// or the row does not exist; create rows before fenced writes update them.
///
/// ```
/// use fencelock::fenced::{FencedUpdate, FencedWrite, Param};
///
/// let update = FencedUpdate::new("accounts", &["balance"])?;
/// assert_eq!(
///     update.sql(),
///     "UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2"
/// );
/// assert_eq!(update.params(), [Param::Value(0), Param::Token, Param::Id]);
/// let token: i64 = update.token(41)?; // bind as BIGINT
/// // ... execute with (new_balance, token, id) and read the number of rows changed:
/// assert_eq!(update.outcome(1)?, FencedWrite::Accepted);
/// assert_eq!(update.outcome(0)?, FencedWrite::Rejected { highest: None });
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct FencedUpdate {
    table: String,
    columns: Vec<String>,
    id: String,
    fence: String,
    style: Placeholders,
    sql: String,
    params: Vec<Param>,
}

/// A fenced update changed more than one row: its id column is not unique.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a fenced update changed {rows} rows; its id column must name one row")]
pub struct NotUnique {
    /// How many rows it changed.
    pub rows: u64,
}

impl FencedUpdate {
    /// The update of `columns` in `table` (`schema.table` allowed). Names are plain SQL
    /// identifiers (letters, digits, `_`, not starting with a digit), written unquoted.
    pub fn new(table: &str, columns: &[&str]) -> Result<Self, InputError> {
        let mut update = Self {
            table: identifier(table, true)?,
            columns: columns
                .iter()
                .map(|c| identifier(c, false))
                .collect::<Result<_, _>>()?,
            id: "id".into(),
            fence: "fence".into(),
            style: Placeholders::Numbered,
            sql: String::new(),
            params: Vec::new(),
        };
        if update.columns.is_empty() {
            return Err(InputError::InvalidOption {
                option: "FencedUpdate columns",
                reason: "name at least one column to update",
            });
        }
        update.build()?;
        Ok(update)
    }

    /// The column that identifies the row (default `id`).
    pub fn id_column(mut self, column: &str) -> Result<Self, InputError> {
        self.id = identifier(column, false)?;
        self.build()?;
        Ok(self)
    }

    /// The column that records the token (default `fence`).
    pub fn fence_column(mut self, column: &str) -> Result<Self, InputError> {
        self.fence = identifier(column, false)?;
        self.build()?;
        Ok(self)
    }

    /// How parameters are written (default [`Placeholders::Numbered`]).
    pub fn placeholders(mut self, style: Placeholders) -> Result<Self, InputError> {
        self.style = style;
        self.build()?;
        Ok(self)
    }

    /// The statement.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The parameters to bind, in order.
    pub fn params(&self) -> &[Param] {
        &self.params
    }

    /// The token as the `BIGINT` to bind. Tokens above `i64::MAX` (possible on Redis after
    /// 2^63 holdings, never on ZooKeeper or etcd) do not fit a `BIGINT` and are an error, not
    /// wrapped.
    pub fn token(&self, token: u64) -> Result<i64, InputError> {
        i64::try_from(token).map_err(|_| InputError::InvalidOption {
            option: "fencing token",
            reason: "above i64::MAX: it does not fit a BIGINT fence column (use NUMERIC(20) \
                     and bind the token as text)",
        })
    }

    /// The outcome from the number of rows the statement changed.
    pub fn outcome(&self, rows: u64) -> Result<FencedWrite, NotUnique> {
        match rows {
            0 => Ok(FencedWrite::Rejected { highest: None }),
            1 => Ok(FencedWrite::Accepted),
            rows => Err(NotUnique { rows }),
        }
    }

    fn build(&mut self) -> Result<(), InputError> {
        if self
            .columns
            .iter()
            .any(|c| *c == self.fence || *c == self.id)
        {
            return Err(InputError::InvalidOption {
                option: "FencedUpdate columns",
                reason: "the id and fence columns are not updated as values",
            });
        }
        let mut params = Vec::new();
        let mut next = |p: Param| {
            params.push(p);
            match self.style {
                Placeholders::Numbered => format!("${}", params.len()),
                Placeholders::Question => "?".to_owned(),
            }
        };
        let mut sets: Vec<String> = Vec::new();
        for (i, c) in self.columns.iter().enumerate() {
            sets.push(format!("{c} = {}", next(Param::Value(i))));
        }
        let token = next(Param::Token);
        sets.push(format!("{} = {token}", self.fence));
        let id = next(Param::Id);
        let again = match self.style {
            Placeholders::Numbered => token,
            Placeholders::Question => next(Param::Token),
        };
        self.sql = format!(
            "UPDATE {} SET {} WHERE {} = {id} AND {} <= {again}",
            self.table,
            sets.join(", "),
            self.id,
            self.fence
        );
        self.params = params;
        Ok(())
    }
}

/// A plain SQL identifier (`schema.name` if `qualified`), or a typed error.
fn identifier(name: &str, qualified: bool) -> Result<String, InputError> {
    let plain = |part: &str| {
        let mut chars = part.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
            && part.len() <= 63
    };
    let parts: Vec<&str> = name.split('.').collect();
    let ok = match parts.as_slice() {
        [one] => plain(one),
        [schema, table] if qualified => plain(schema) && plain(table),
        _ => false,
    };
    if ok {
        Ok(name.to_owned())
    } else {
        Err(InputError::InvalidOption {
            option: "SQL identifier",
            reason: "use letters, digits and '_' (not first), at most 63 bytes; \
                     `schema.table` for a table",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn question_marks_bind_the_token_twice() {
        let u = FencedUpdate::new("jobs", &["state", "owner"])
            .unwrap()
            .fence_column("epoch")
            .unwrap()
            .id_column("job_id")
            .unwrap()
            .placeholders(Placeholders::Question)
            .unwrap();
        assert_eq!(
            u.sql(),
            "UPDATE jobs SET state = ?, owner = ?, epoch = ? WHERE job_id = ? AND epoch <= ?"
        );
        assert_eq!(
            u.params(),
            [
                Param::Value(0),
                Param::Value(1),
                Param::Token,
                Param::Id,
                Param::Token
            ]
        );
    }

    #[test]
    fn bad_names_and_tokens_are_refused() {
        for bad in ["", "1x", "a b", "x;drop", "a.b.c", "\"q\""] {
            assert!(FencedUpdate::new(bad, &["v"]).is_err(), "{bad:?}");
            assert!(FencedUpdate::new("t", &[bad]).is_err(), "{bad:?}");
        }
        assert!(FencedUpdate::new("s.t", &["v"]).is_ok());
        assert!(FencedUpdate::new("t", &["s.v"]).is_err());
        assert!(FencedUpdate::new("t", &[]).is_err());
        assert!(FencedUpdate::new("t", &["fence"]).is_err());
        let u = FencedUpdate::new("t", &["v"]).unwrap();
        assert!(u.clone().id_column("v").is_err());
        assert_eq!(u.token(i64::MAX as u64), Ok(i64::MAX));
        assert!(u.token(u64::MAX).is_err());
        assert_eq!(u.outcome(2), Err(NotUnique { rows: 2 }));
    }
}
