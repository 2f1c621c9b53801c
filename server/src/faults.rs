//! Fault points at the worker's step boundaries and inside the job store's transactions, for
//! tests that crash, pause or break an attempt at an exact place. They exist only when the
//! `failpoints` feature is on (the test command turns it on); otherwise [`Faults::check`] is an
//! empty inline function.
//!
//! The points, in the order an attempt meets them: `claim_before_commit` (inside the claim's
//! transaction, after its UPDATEs), `after_claim`, `each_chunk` (after every chunk of rows
//! handed to the upload), `mid_stream` (after the first chunk), `after_staging` (staged and
//! validated), `before_publish` (after the ownership fence, just before the copy into
//! `exports/`), `after_publish`, `before_release`, `release_before_commit` (inside the
//! release's transaction, after its UPDATE), `after_release`, and `before_end_attempt` (on the
//! failure path, before the transition). A checkpointed export meets, for each part,
//! `each_chunk`, `mid_stream`, `after_part_staged` (streamed, before its check) and
//! `after_checkpoint` (its checkpoint committed), then `before_release` and the rest; and
//! `before_part_read_ahead` and `part_read_ahead` just before and just after a part's read
//! begins while the part before it streams.
//!
//! They are configured with the `fail` crate: `FAILPOINTS=after_publish=return(crash)` in a
//! process's environment, or `fail::cfg` / `fail::cfg_callback` in-process. `return(crash)`
//! aborts the process on the spot (a crash); any other `return` makes the step fail as the
//! object store would; `sleep`, `pause` and callbacks run off the async threads, so the rest of
//! the process (heartbeats, other jobs) keeps going.

/// Where a worker's fault points are looked up. A scope prefixes every point's name, so tests
/// that run several workers in one process can arm one worker's points without touching the
/// others'; a process's own worker has the empty scope, and `FAILPOINTS` names points plainly.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    scope: std::sync::Arc<str>,
}

/// A fault point's `return` action: the step fails as if storage had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Injected;

impl Faults {
    /// Points named `{scope}{point}`.
    pub fn scoped(scope: &str) -> Faults {
        Faults { scope: scope.into() }
    }

    /// The full name a point has in this scope.
    pub fn name(&self, point: &str) -> String {
        format!("{}{point}", self.scope)
    }

    /// Passes the fault point `point` of the attempt on `export_id`.
    #[cfg(feature = "failpoints")]
    pub fn check(&self, point: &'static str, export_id: &str) -> Result<(), Injected> {
        let name = self.name(point);
        // Tests of real processes wait for this line before they signal the process.
        tracing::info!(target: "exportd::fault", point = %name, export = %export_id, "fault point reached");
        let eval = || fail::eval(&name, |arg| arg);
        let outcome = match tokio::runtime::Handle::try_current() {
            Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => tokio::task::block_in_place(eval),
            _ => eval(),
        };
        match outcome {
            None => Ok(()),
            Some(Some(arg)) if arg == "crash" => std::process::abort(),
            Some(_) => Err(Injected),
        }
    }

    /// Passes the fault point `point` (fault points are compiled out).
    #[cfg(not(feature = "failpoints"))]
    #[inline(always)]
    pub fn check(&self, _point: &'static str, _export_id: &str) -> Result<(), Injected> {
        Ok(())
    }
}

/// Reads `FAILPOINTS` for this process; keep the guard for the process's lifetime.
#[cfg(feature = "failpoints")]
pub fn from_environment() -> Option<fail::FailScenario<'static>> {
    Some(fail::FailScenario::setup())
}

/// Fault points are compiled out.
#[cfg(not(feature = "failpoints"))]
pub fn from_environment() -> Option<()> {
    None
}
