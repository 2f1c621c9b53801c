//! One attempt at an import (SPEC §10). Its first attempt validates the whole file — every
//! record, before anything is written — writes the errors to a report and fixes what it found as
//! the job's checkpoint plan, so no later attempt validates again. Then, unless its policy fails
//! it, it applies the valid records in batches: each batch is one transaction holding the fenced
//! checkpoint of the batch (the job's row, this generation, running, the actor still an admin),
//! the batch's upserts and the rows the database refused, so a batch commits exactly once and a
//! lost worker's batch commits nothing; a later attempt continues after the last committed
//! record. A bounded wait inside a batch (a lock, a deadlock) rolls it back and runs it again,
//! until the stall rule ends the attempt. A dry run does the same work in transactions it rolls
//! back, and records its checkpoints apart. The report is written by [`super::import_report`]:
//! before the release of a ready import, and after every other ending, whoever caused it.

use super::attempt::{begin, end, Stop};
use super::duplicate_keys::KeyRuns;
use super::import_file::{self, Entries, Next, Row, Rows};
use super::import_report::{self, Ending, VALIDATION_REPORT};
use super::import_writes::{self, Ledgered, Target};
use crate::catalog::Dataset;
use crate::entities::jobs;
use crate::imports::cells::Problem;
use crate::imports::stored::{self, request_of, resolved_of, Mark, Plan, Refused};
use crate::job_store::authority::Permission;
use crate::job_store::transitions::{self, Artifact, Failure, Refusal};
use crate::job_store::{begin_write, checkpoints, Mover};
use crate::storage::ExportStore;
use crate::worker::lease::Lease;
use crate::worker::WorkerContext;
use app::{ImportMode, OnError, RowError};
use sea_orm::{DatabaseConnection, DbErr};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// Errors kept in the view.
const FIRST_ERRORS: usize = 10;

/// Runs one claimed import to the end of its attempt; an ending other than the release then
/// gets its report, as every ending does (the janitor writes it when this process cannot).
pub async fn run(ctx: &WorkerContext, job: jobs::Model) {
    let Some(lease) = begin(ctx, &job).await else { return };
    let store = ctx.stores.for_deployment(&ctx.db, &job.deployment).await;
    let result = match &store {
        Ok(store) => {
            let attempt = Attempt { ctx, job: &job, store, lease: &lease };
            // A cancel is met at the next batch; a lost lease or a stall ends the attempt
            // wherever it waits.
            tokio::select! {
                biased;
                result = attempt.run_to_its_end() => result,
                holding = lease.lost() => Err(Stop::interrupted(holding)),
            }
        }
        Err(e) => Err(Stop::storage(e)),
    };
    drop(lease);
    end(ctx, &job, result).await;
    if let Ok(store) = store {
        // A process shutting down leaves the report to a janitor: it may take a file's read.
        if !ctx.shutdown.is_cancelled() {
            import_report::settle_logged(ctx, &store, &job.id).await;
        }
        import_report::forget_staging(&store, &job).await;
    }
}

struct Attempt<'a> {
    ctx: &'a WorkerContext,
    job: &'a jobs::Model,
    store: &'a ExportStore,
    lease: &'a Lease,
}

impl Attempt<'_> {
    fn checkpoint(&self) -> Result<(), Stop> {
        match self.lease.holding() {
            crate::worker::lease::Holding::Held if self.ctx.shutdown.is_cancelled() => Err(Stop::Shutdown),
            crate::worker::lease::Holding::Held => Ok(()),
            other => Err(Stop::interrupted(other)),
        }
    }

    fn fault(&self, point: &'static str) -> Result<(), Stop> {
        Ok(self.ctx.faults.check(point, &self.job.id)?)
    }

    async fn authorised(&self) -> Result<(), Stop> {
        super::attempt::authorised(self.ctx, self.job, Permission::Import).await
    }

    /// Runs the attempt; when it ends the import for good (failed, cancelled), its report is
    /// recorded first, under the lease, so the ending and its report are seen together.
    async fn run_to_its_end(&self) -> Result<Box<jobs::Model>, Stop> {
        let result = self.run().await.map_err(|stop| match stop {
            // The refusal of a batch or of the release after a revocation is the import's own.
            Stop::Revoked => Stop::Failed { failure: Failure::IMPORT_REVOKED, detail: "the actor may no longer import".into() },
            other => other,
        });
        if let Err(stop) = &result {
            if ends_for_good(stop, self.job, self.ctx.config.max_attempts) {
                import_report::attach_before_ending(self.ctx, self.store, self.job).await;
            }
        }
        result
    }

    async fn run(&self) -> Result<Box<jobs::Model>, Stop> {
        let job = self.job;
        self.fault("after_claim")?;
        self.checkpoint()?;
        let request = request_of(job).map_err(Stop::internal)?;
        let dataset = dataset_of(self.ctx, &request.dataset)?;
        self.authorised().await?;
        let tenant = crate::entities::tenants::source_id_of(&self.ctx.db, &job.tenant_id).await.map_err(Stop::internal)?;
        let target = Target::load(self.source(), &self.ctx.config.catalog, dataset.clone(), tenant).await.map_err(Stop::internal)?;
        let plan = match stored::plan_of(job).map_err(Stop::internal)? {
            Some(plan) => plan,
            None => {
                let mut found = self.validate(&dataset, &target, request.on_error, request.max_errors).await?;
                found.batch_rows = Some(self.ctx.config.import_batch_rows as i64);
                let text = serde_json::to_string(&found).map_err(Stop::internal)?;
                let fixed = checkpoints::fix_plan(&self.ctx.db, job, &text).await.map_err(Stop::internal)?.map_err(Stop::refused)?;
                serde_json::from_str(&fixed).map_err(Stop::internal)?
            }
        };
        // From here on the progress counts the file's records applied, out of all of them.
        self.lease.total(plan.rows);
        if let Some(code) = &plan.fails {
            let failure = if code == Failure::INVALID_FILE.code { Failure::INVALID_FILE } else { Failure::VALIDATION_FAILED };
            return Err(Stop::Failed { failure, detail: failure.code.to_owned() });
        }
        let last = self.apply(&dataset, &target, request.mode, request.on_error, &plan).await?;
        let report = import_report::write(self.ctx, self.store, job, Ending::Released).await?;
        self.fault("import_before_release")?;
        self.checkpoint()?;
        let artifact = Artifact { key: report.key.clone(), sha256: report.sha256.clone(), bytes: report.bytes, rows: plan.rows, bundle_digest: None };
        let by = Mover::Worker(&self.ctx.worker_id);
        let authorised = super::attempt::fenced_authority(self.ctx, job, Permission::Import).await?;
        let released = transitions::release(&self.ctx.db, job, &artifact, self.ctx.config.artifact_ttl, authorised, by, &self.ctx.faults)
            .await
            .map_err(Stop::internal)?
            .map_err(Stop::refused)?;
        self.ctx.metrics.rows_imported.inc_by(if request.mode == ImportMode::Apply { last.applied() as u64 } else { 0 });
        self.ctx.metrics.rows_rejected.inc_by((plan.invalid + last.refused) as u64);
        Ok(released)
    }

    /// The file's rows by `dataset`'s header.
    fn rows(&self, dataset: &Arc<Dataset>) -> Result<Rows, Stop> {
        let resolved = resolved_of(self.job).map_err(Stop::internal)?;
        Ok(import_file::rows(self.store, &resolved.object_key, &import_file::Reading::of(self.ctx, dataset)))
    }

    /// Where the dataset's rows are written: the source, when it is a database apart from the
    /// job store, else the job store's own.
    fn source(&self) -> &DatabaseConnection {
        self.ctx.source.as_ref().unwrap_or(&self.ctx.db)
    }

    /// The keys the file carries more than once (as 64-bit digests of the key), found in sorted
    /// runs on disk, so the memory it takes does not grow with the file.
    async fn duplicated_keys(&self, dataset: &Arc<Dataset>) -> Result<Result<HashSet<u64>, Problem>, Stop> {
        let mut runs = KeyRuns::default();
        let mut reader = self.rows(dataset)?;
        loop {
            match reader.next().await? {
                Next::Rows(rows) => {
                    for row in rows {
                        if let Some(key) = row.key(dataset) {
                            runs.push(digest64(&key)).map_err(Stop::internal)?;
                        }
                    }
                    self.checkpoint()?;
                }
                Next::End => break,
                Next::Invalid(p) => return Ok(Err(p)),
            }
        }
        let merged = tokio::task::spawn_blocking(move || runs.duplicated()).await.map_err(Stop::internal)?;
        Ok(Ok(merged.map_err(Stop::internal)?))
    }

    /// Marks every error of `rows` that needs the file as a whole or the database: a duplicated
    /// key, and a reference that names no row of the tenant. Only the validating phase checks
    /// them; the applying phase meets a reference gone since as a refusal, so a row keeps the
    /// verdict its validation gave it.
    async fn refine(&self, dataset: &Dataset, target: &Target, rows: &mut [Row], duplicated: &HashSet<u64>) -> Result<(), Stop> {
        for row in rows.iter_mut() {
            if let Some(key) = row.key(dataset) {
                if duplicated.contains(&digest64(&key)) {
                    let column = dataset.key.first().map_or("", |k| k.name.as_str());
                    row.problems.push(Problem::new(column, "duplicate_key", "this key appears more than once in the file"));
                }
            }
        }
        if dataset.columns.iter().any(|c| c.references.is_some()) {
            let found = {
                let all: Vec<&Row> = rows.iter().collect();
                target.referenced(self.source(), &all).await.map_err(Stop::internal)?
            };
            for row in rows.iter_mut() {
                let mut unknown = Vec::new();
                for (index, column) in dataset.columns.iter().enumerate() {
                    let Some(r) = &column.references else { continue };
                    let Some(referred) = self.ctx.config.catalog.dataset(&r.dataset) else { continue };
                    let compare = referred.key.iter().find(|k| k.name == r.key).map_or(crate::catalog::Compare::Exact, |k| k.compare);
                    if let Some(cell) = row.value(index).and_then(|v| v.compared(compare)) {
                        if !found[index].contains_key(&cell) {
                            unknown.push(Problem::new(&column.name, "unknown_reference", format!("no {} of yours has this {}", r.dataset, r.key)));
                        }
                    }
                }
                row.problems.extend(unknown);
            }
        }
        Ok(())
    }

    /// The validating phase: every record checked, the errors written to a report.
    async fn validate(&self, dataset: &Arc<Dataset>, target: &Target, on_error: OnError, max_errors: Option<u64>) -> Result<Plan, Stop> {
        let duplicated = match self.duplicated_keys(dataset).await? {
            Ok(d) => d,
            Err(p) => return Ok(invalid_file(p)),
        };
        let staging = crate::storage::staging_part_key(&self.job.id, self.job.generation, VALIDATION_REPORT);
        // The validation's report is read back only here, by record position (its line).
        let mut report = import_report::ReportWriter::start(self.store, &staging, false).map_err(Stop::internal)?;
        let (mut rows_n, mut invalid, mut first) = (0i64, 0i64, Vec::new());
        let mut reader = self.rows(dataset)?;
        loop {
            let mut rows = match reader.next().await? {
                Next::Rows(rows) => rows,
                Next::End => break,
                Next::Invalid(p) => return Ok(invalid_file(p)),
            };
            self.refine(dataset, target, &mut rows, &duplicated).await?;
            for row in &rows {
                rows_n += 1;
                if !row.problems.is_empty() {
                    invalid += 1;
                    for p in &row.problems {
                        if first.len() < FIRST_ERRORS {
                            first.push(RowError { line: row.record.line, sheet: row.record.sheet_name().map(str::to_owned), column: p.column.clone(), code: p.code.to_string(), message: p.message.clone() });
                        }
                        report.row(row.record.position(), None, &p.column, &p.code, &p.message, &row.record.cells).await.map_err(Stop::storage)?;
                    }
                }
            }
            self.lease.wrote(rows_n);
            self.fault("import_validating")?;
            self.checkpoint()?;
        }
        let written = report.finish(self.store, &self.job.tenant_id, &self.job.id, &staging).await.map_err(Stop::storage)?;
        let too_many = match on_error {
            OnError::Abort => invalid > 0,
            OnError::SkipInvalid => max_errors.is_some_and(|n| invalid as u64 > n),
        };
        Ok(Plan {
            rows: rows_n,
            valid: rows_n - invalid,
            invalid,
            first_errors: first,
            report: Some(written),
            fails: too_many.then(|| Failure::VALIDATION_FAILED.code.to_owned()),
            batch_rows: None,
        })
    }

    /// The applying phase: the valid records after the last committed batch, in batches of
    /// the size its plan fixed (so a batch starts on the same record in every attempt).
    async fn apply(&self, dataset: &Arc<Dataset>, target: &Target, mode: ImportMode, on_error: OnError, plan: &Plan) -> Result<Mark, Stop> {
        // The rows the validation found invalid (a duplicated key among them) are those its
        // report names, read beside the file in line order: the file is not searched again.
        let mut invalid = match &plan.report {
            Some(file) if plan.invalid > 0 => Entries::open(self.store, &file.key),
            _ => Entries::none(),
        };
        let start = stored::last_mark(&self.ctx.db, &self.job.id).await.map_err(Stop::internal)?;
        self.lease.wrote(start.last_record);
        let mut state = Applying { seq: self.job.checkpoint_seq, last: start, pending: Vec::new() };
        let batch_rows = plan.batch_rows.unwrap_or(self.ctx.config.import_batch_rows as i64).max(1) as usize;
        let mut reader = self.rows(dataset)?;
        loop {
            let rows = match reader.next().await? {
                Next::Rows(rows) => rows,
                Next::End => break,
                Next::Invalid(p) => return Err(Stop::invalid_data(p.message)),
            };
            for mut row in rows {
                if row.record.number <= state.last.last_record {
                    continue;
                }
                let known = invalid.take(row.record.position()).await?;
                if !known.is_empty() && row.problems.is_empty() {
                    row.problems.push(Problem::new("", "invalid", "invalid when the file was validated"));
                }
                state.pending.push(row);
                if state.pending.len() >= batch_rows {
                    self.batch(target, mode, on_error, &mut state).await?;
                }
            }
            self.checkpoint()?;
        }
        if !state.pending.is_empty() {
            self.batch(target, mode, on_error, &mut state).await?;
        }
        Ok(state.last)
    }

    /// Applies (or, in a dry run, tries and rolls back) the pending rows as one batch with its
    /// checkpoint. A bounded wait (a lock held past `lock_timeout`, a deadlock, a serialization
    /// failure, SQLite's busy timeout) rolls the batch back and runs it again after a pause:
    /// nothing moved, so nothing is counted, and the stall rule bounds how long it may go on.
    async fn batch(&self, target: &Target, mode: ImportMode, on_error: OnError, state: &mut Applying) -> Result<(), Stop> {
        let mut waits = 0u32;
        loop {
            match self.try_batch(target, mode, on_error, state).await? {
                Some(mark) => {
                    state.seq += 1;
                    state.last = mark;
                    state.pending.clear();
                    return Ok(());
                }
                None => {
                    waits += 1;
                    self.ctx.metrics.import_batch_waits.inc();
                    tracing::info!(job = %self.job.id, waits, "a batch met a bounded wait; it runs again");
                    tokio::time::sleep(Duration::from_millis(100 << waits.min(4))).await;
                    self.checkpoint()?;
                }
            }
        }
    }

    /// One try at the pending rows: the batch's counts once committed, or `None` when a bounded
    /// wait gave up and nothing moved.
    async fn try_batch(&self, target: &Target, mode: ImportMode, on_error: OnError, state: &Applying) -> Result<Option<Mark>, Stop> {
        self.fault("import_before_batch")?;
        self.checkpoint()?;
        self.authorised().await?;
        let (Some(first_record), Some(last_record)) = (state.pending.first().map(|r| r.record.number), state.pending.last().map(|r| r.record.number)) else {
            return Ok(Some(state.last));
        };
        let batch = Batch { target, mode, on_error, rows: &state.pending, seq: state.seq + 1, first_record };
        let mut mark = state.last;
        mark.last_record = last_record;
        let mut refused = Vec::new();
        let written = if self.ctx.source.is_some() && mode == ImportMode::Apply {
            self.write_batch_apart(&batch, &mut mark, &mut refused).await
        } else {
            self.write_batch(&batch, &mut mark, &mut refused).await
        };
        match written {
            Ok(Written::Committed) => {
                self.lease.wrote(last_record);
                Ok(Some(mark))
            }
            Ok(Written::Refused(refusal)) => Err(Stop::refused(refusal)),
            Ok(Written::Faulted) => Err(Stop::storage("a fault point stopped the batch before its commit")),
            Ok(Written::RolledBackUnderAbort) => {
                // The report lists them all the same: recorded past the last checkpoint, as a
                // batch that did not commit.
                stored::record_refusals(&self.ctx.db, &self.job.id, batch.seq, &refused).await.map_err(Stop::internal)?;
                Err(Stop::Failed { failure: Failure::APPLY_FAILED, detail: format!("{} row(s) refused in batch {}", refused.len(), batch.seq) })
            }
            Err(e) if crate::db::is_busy(&e) => Ok(None),
            Err(e) => Err(Stop::internal(e)),
        }
    }

    /// The batch's transaction on the job store's own database: its fenced checkpoint (an
    /// apply's is opened first, so the job's row is this attempt's for the whole batch), its
    /// rows, the rows refused, and its commit.
    async fn write_batch(&self, batch: &Batch<'_>, mark: &mut Mark, refused: &mut Vec<Refused>) -> Result<Written, DbErr> {
        let txn = begin_write(self.source()).await?;
        let opened = if batch.mode == ImportMode::Apply {
            match checkpoints::open_step(&txn, self.job, batch.seq, mark.last_record, Some(self.ctx.authority.condition(Permission::Import))).await? {
                Some(row) => Some(row),
                None => {
                    txn.rollback().await?;
                    return Ok(Written::Refused(checkpoints::refusal(&self.ctx.db, self.job).await?));
                }
            }
        } else {
            None
        };
        let planned = batch.target.plan(&txn, batch.rows).await?;
        batch.target.write(&txn, planned, mark, refused).await?;
        if batch.on_error == OnError::Abort && !refused.is_empty() {
            txn.rollback().await?;
            return Ok(Written::RolledBackUnderAbort);
        }
        let (txn, row) = match opened {
            Some(row) => (txn, row),
            // A dry run writes nothing of its rows: its checkpoint goes in a transaction of its
            // own, in the job store.
            None => {
                txn.rollback().await?;
                let txn = begin_write(&self.ctx.db).await?;
                match checkpoints::open_step(&txn, self.job, batch.seq, mark.last_record, None).await? {
                    Some(row) => (txn, row),
                    None => {
                        txn.rollback().await?;
                        return Ok(Written::Refused(checkpoints::refusal(&self.ctx.db, self.job).await?));
                    }
                }
            }
        };
        self.close_batch(txn, row, batch.seq, mark, refused).await
    }

    /// The batch's two transactions when the source is a database apart (contract §12), one
    /// after the other, so the job store's write lock is never held while the source works
    /// (the lease and the actor's authority were checked just before): on the source, the
    /// batch's ledger row is inserted first (a batch an earlier attempt applied is skipped, its
    /// counts taken from the ledger), then its rows, and the source commits; then the fenced
    /// checkpoint in the job store. A checkpoint refused after the source committed leaves the
    /// batch to the ledger, where the next attempt finds it; its refused rows are recorded all
    /// the same, so the report names them.
    async fn write_batch_apart(&self, batch: &Batch<'_>, mark: &mut Mark, refused: &mut Vec<Refused>) -> Result<Written, DbErr> {
        if let Some(ended) = self.apply_in_source(batch, mark, refused).await? {
            return Ok(ended);
        }
        let job_txn = begin_write(&self.ctx.db).await?;
        let Some(row) = checkpoints::open_step(&job_txn, self.job, batch.seq, mark.last_record, Some(self.ctx.authority.condition(Permission::Import))).await? else {
            job_txn.rollback().await?;
            stored::record_refusals(&self.ctx.db, &self.job.id, batch.seq, refused).await?;
            return Ok(Written::Refused(checkpoints::refusal(&self.ctx.db, self.job).await?));
        };
        self.close_batch(job_txn, row, batch.seq, mark, refused).await
    }

    /// The batch's transaction on a source apart: `None` once it is in the source (applied now,
    /// or by an earlier attempt), or how the batch ended without it.
    async fn apply_in_source(&self, batch: &Batch<'_>, mark: &mut Mark, refused: &mut Vec<Refused>) -> Result<Option<Written>, DbErr> {
        let source = begin_write(self.source()).await?;
        if let Some(ledgered) = import_writes::ledger_take(&source, &self.job.id, batch.first_record, mark.last_record).await? {
            source.rollback().await?;
            tracing::info!(job = %self.job.id, first = batch.first_record, "the source's ledger holds this batch: it is not applied again");
            mark.created += ledgered.created;
            mark.updated += ledgered.updated;
            mark.unchanged += ledgered.unchanged;
            mark.refused += ledgered.refused;
            refused.extend(ledgered.refusals.into_iter().map(|(record, line, message)| Refused { record, line, message }));
            return Ok(None);
        }
        let before = *mark;
        let planned = batch.target.plan(&source, batch.rows).await?;
        batch.target.write(&source, planned, mark, refused).await?;
        if batch.on_error == OnError::Abort && !refused.is_empty() {
            source.rollback().await?;
            return Ok(Some(Written::RolledBackUnderAbort));
        }
        let counts = Ledgered {
            created: mark.created - before.created,
            updated: mark.updated - before.updated,
            unchanged: mark.unchanged - before.unchanged,
            refused: mark.refused - before.refused,
            refusals: refused.iter().map(|r| (r.record, r.line, r.message.clone())).collect(),
        };
        import_writes::ledger_record(&source, &self.job.id, batch.first_record, &counts).await?;
        if self.ctx.faults.check("import_batch_before_commit", &self.job.id).is_err() {
            source.rollback().await?;
            return Ok(Some(Written::Faulted));
        }
        source.commit().await?;
        if self.ctx.faults.check("import_source_committed", &self.job.id).is_err() {
            return Ok(Some(Written::Faulted));
        }
        Ok(None)
    }

    /// Records the batch's refusals and closes its checkpoint in the job store, and commits.
    async fn close_batch(&self, txn: sea_orm::DatabaseTransaction, row: jobs::Model, seq: i32, mark: &Mark, refused: &[Refused]) -> Result<Written, DbErr> {
        let payload = serde_json::to_value(mark).map_err(|e| DbErr::Custom(e.to_string()))?;
        stored::record_refusals(&txn, &self.job.id, seq, refused).await?;
        checkpoints::close_step(&txn, self.job, &row, seq, &payload, Mover::Worker(&self.ctx.worker_id)).await?;
        if self.ctx.source.is_none() && self.ctx.faults.check("import_batch_before_commit", &self.job.id).is_err() {
            txn.rollback().await?;
            return Ok(Written::Faulted);
        }
        txn.commit().await?;
        Ok(Written::Committed)
    }
}

/// One batch of an attempt: its rows and how they are written.
struct Batch<'a> {
    target: &'a Target,
    mode: ImportMode,
    on_error: OnError,
    rows: &'a [Row],
    seq: i32,
    /// The number of its first record: its ledger row's key.
    first_record: i64,
}

/// The dataset of an import, by name, from this worker's catalog (the claim matched its digest).
fn dataset_of(ctx: &WorkerContext, name: &str) -> Result<Arc<Dataset>, Stop> {
    ctx.config.catalog.dataset(name).cloned().map(Arc::new).ok_or_else(|| Stop::internal(format!("the dataset {name:?} is not in this worker's catalog")))
}

/// Whether `stop` ends the import for good rather than for a later attempt: a cancel, a
/// permanent failure, or a transient one with no attempt left (the attempt's own
/// transition decides the same way; a report recorded before a move that went otherwise is
/// replaced at the release, or cleared by a redrive).
fn ends_for_good(stop: &Stop, job: &jobs::Model, max_attempts: i32) -> bool {
    match stop {
        Stop::CancelRequested | Stop::Revoked => true,
        Stop::Failed { failure, .. } => !failure.transient || job.attempt >= max_attempts,
        Stop::Stalled | Stop::OutOfKeyOrder(_) => job.attempt >= max_attempts,
        Stop::Lost | Stop::Shutdown => false,
    }
}

/// The plan of a file that cannot be read as the dataset's CSV.
fn invalid_file(p: Problem) -> Plan {
    Plan {
        rows: 0,
        valid: 0,
        invalid: 0,
        first_errors: vec![RowError { line: 1, sheet: None, column: p.column, code: p.code.into_owned(), message: p.message }],
        report: None,
        fails: Some(Failure::INVALID_FILE.code.to_owned()),
        batch_rows: None,
    }
}

/// How a batch's transaction ended.
enum Written {
    /// Committed with its checkpoint.
    Committed,
    /// The checkpoint was refused (the job is not this attempt's, a cancel was asked, the actor
    /// may no longer import): nothing written.
    Refused(Refusal),
    /// Rows were refused under `abort`: rolled back.
    RolledBackUnderAbort,
    /// A fault point stopped it before its commit (tests).
    Faulted,
}

struct Applying {
    seq: i32,
    last: Mark,
    pending: Vec<Row>,
}

fn digest64(key: &str) -> u64 {
    let d = Sha256::digest(key.as_bytes());
    u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}
