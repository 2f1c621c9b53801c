//! Sessions of other programs that hold a lock the way a frozen exportd process would: a `psql`
//! session inside a transaction (a row lock, a table lock), and a Python `sqlite3` session
//! holding SQLite's write lock. Each holds until it is released or dropped.

use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};

/// A program holding a lock until released.
pub struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
    what: String,
}

impl Holder {
    async fn start(mut cmd: Command, what: &str, script: &str) -> Holder {
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit()).kill_on_drop(true).spawn().expect("start the lock holder");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(script.as_bytes()).await.expect("write to the lock holder");
        stdin.flush().await.unwrap();
        let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        let held = tokio::time::timeout(Duration::from_secs(30), async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.trim() == "held" {
                    return true;
                }
            }
            false
        })
        .await;
        assert!(matches!(held, Ok(true)), "{what}: the lock was not taken");
        Holder { child, stdin: Some(stdin), what: what.to_owned() }
    }

    /// A `psql` session on `url` that runs `BEGIN;` and `sql` and then holds its transaction.
    pub async fn psql(url: &str, sql: &str) -> Holder {
        let mut cmd = Command::new("psql");
        cmd.args(["-X", "-q", "-v", "ON_ERROR_STOP=1", url]);
        Holder::start(cmd, &format!("psql: {sql}"), &format!("BEGIN;\n{sql}\n\\echo held\n")).await
    }

    /// A Python `sqlite3` session on the database file at `path` holding its write lock
    /// (`BEGIN IMMEDIATE`).
    pub async fn sqlite_write_lock(path: &str) -> Holder {
        let script = "import sqlite3, sys\n\
                      c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)\n\
                      c.execute('BEGIN IMMEDIATE')\n\
                      print('held', flush=True)\n\
                      sys.stdin.read()\n\
                      c.execute('ROLLBACK')\n";
        let mut cmd = Command::new("python3");
        cmd.args(["-c", script, path]);
        Holder::start(cmd, "sqlite3: BEGIN IMMEDIATE", "").await
    }

    /// Ends the transaction (rolled back) and the program.
    pub async fn release(mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            if self.what.starts_with("psql") {
                let _ = stdin.write_all(b"ROLLBACK;\n\\q\n").await;
            }
            drop(stdin);
        }
        let status = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
        assert!(matches!(status, Ok(Ok(s)) if s.success()), "{}: did not end cleanly: {status:?}", self.what);
    }
}
