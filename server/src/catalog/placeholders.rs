//! The placeholders of a catalog's own SQL (`after_batch`, `[authority] sql`; contract §12):
//! `:tenant`, `:subject`, `:keys` and `:refs`, outside string literals, quoted names and
//! comments, become bound parameters; a `::` (PostgreSQL's cast) is not one. PostgreSQL's
//! dollar-quoted strings are not read as strings: a catalog's SQL uses `'…'`.

use sea_orm::{DbBackend, Statement};

/// The placeholders a catalog's SQL may use.
pub const NAMES: [&str; 4] = ["tenant", "subject", "keys", "refs"];

/// The names of the placeholders `sql` uses, in order, or the first one it does not know.
pub fn used(sql: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    rewrite(sql, DbBackend::Sqlite, |name| names.push(name.to_owned()))?;
    Ok(names)
}

/// `sql` as a statement of `backend`, each placeholder bound to `value(name)` as text (NULL
/// when it gives none); an unknown placeholder is an error.
pub fn statement(sql: &str, backend: DbBackend, value: impl Fn(&str) -> Option<String>) -> Result<Statement, String> {
    let mut values: Vec<sea_orm::Value> = Vec::new();
    let text = rewrite(sql, backend, |name| values.push(value(name).into()))?;
    Ok(Statement::from_sql_and_values(backend, text, values))
}

/// `sql` with each placeholder replaced by the backend's parameter marker; `seen` is told
/// each one's name in order.
fn rewrite(sql: &str, backend: DbBackend, mut seen: impl FnMut(&str)) -> Result<String, String> {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.char_indices().peekable();
    let mut bound = 0usize;
    while let Some((at, c)) = chars.next() {
        match c {
            '\'' | '"' => {
                out.push(c);
                // To the closing quote; a doubled quote is one inside the literal.
                while let Some((_, inner)) = chars.next() {
                    out.push(inner);
                    if inner == c {
                        if chars.peek().is_some_and(|(_, n)| *n == c) {
                            if let Some((_, n)) = chars.next() {
                                out.push(n);
                            }
                            continue;
                        }
                        break;
                    }
                }
            }
            // A comment is copied as it is: a quote or a placeholder in it is neither.
            '-' if chars.peek().is_some_and(|(_, n)| *n == '-') => {
                out.push(c);
                for (_, inner) in chars.by_ref() {
                    out.push(inner);
                    if inner == '\n' {
                        break;
                    }
                }
            }
            '/' if chars.peek().is_some_and(|(_, n)| *n == '*') => {
                out.push(c);
                if let Some((_, star)) = chars.next() {
                    out.push(star);
                }
                let mut last = ' ';
                for (_, inner) in chars.by_ref() {
                    out.push(inner);
                    if last == '*' && inner == '/' {
                        break;
                    }
                    last = inner;
                }
            }
            ':' if chars.peek().is_some_and(|(_, n)| *n == ':') => {
                out.push_str("::");
                chars.next();
            }
            ':' if chars.peek().is_some_and(|(_, n)| n.is_ascii_alphabetic() || *n == '_') => {
                let start = at + 1;
                let mut end = start;
                while let Some((i, n)) = chars.peek().copied() {
                    if n.is_ascii_alphanumeric() || n == '_' {
                        end = i + n.len_utf8();
                        chars.next();
                    } else {
                        break;
                    }
                }
                let name = &sql[start..end];
                if !NAMES.contains(&name) {
                    return Err(format!("unknown placeholder :{name}; one of :tenant, :subject, :keys, :refs"));
                }
                seen(name);
                bound += 1;
                match backend {
                    DbBackend::Postgres => out.push_str(&format!("${bound}")),
                    _ => out.push('?'),
                }
            }
            other => out.push(other),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_parameters_outside_literals_and_casts_stay_casts() {
        let sql = "UPDATE t SET n = 1 WHERE org = :tenant AND id IN (SELECT value::bigint FROM json_array_elements_text(:refs::json)) AND note <> ':keys' AND \"a:b\" = 1";
        let stmt = statement(sql, DbBackend::Postgres, |name| Some(format!("<{name}>"))).unwrap();
        assert_eq!(stmt.sql, "UPDATE t SET n = 1 WHERE org = $1 AND id IN (SELECT value::bigint FROM json_array_elements_text($2::json)) AND note <> ':keys' AND \"a:b\" = 1");
        assert_eq!(used(sql).unwrap(), vec!["tenant", "refs"]);
        assert_eq!(statement("SELECT :keys, 'it''s :x'", DbBackend::Sqlite, |_| None).unwrap().sql, "SELECT ?, 'it''s :x'");
        assert!(used("SELECT :other").unwrap_err().contains(":other"));
        let commented = "SELECT 1 -- don't :keys\nFROM t WHERE a = :tenant /* it's :refs */ AND b = :refs";
        assert_eq!(used(commented).unwrap(), vec!["tenant", "refs"], "quotes and placeholders in comments are neither");
    }
}
