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
use crate::entities::{customers, jobs, orders};
use crate::imports::datasets::{Dataset, Problem, Value};
use crate::imports::stored::{self, request_of, resolved_of, Mark, Plan, Refused};
use crate::job_store::authority::Authority;
use crate::job_store::transitions::{self, Artifact, Failure, Refusal};
use crate::job_store::{begin_write, checkpoints, Mover};
use crate::storage::ExportStore;
use crate::worker::lease::Lease;
use crate::worker::WorkerContext;
use app::{ImportMode, OnError, RowError};
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveValue::NotSet, ColumnTrait, ConnectionTrait, DatabaseTransaction, DbErr, EntityTrait, QueryFilter, Set, TransactionTrait};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
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
        let actor = crate::auth::load_active_actor(&self.ctx.db, &self.job.actor_id, crate::auth::AuthVia::Token).await.map_err(Stop::internal)?;
        match actor {
            Some(a) if a.tenant_id == self.job.tenant_id && a.role.may_import() => Ok(()),
            _ => Err(Stop::Revoked),
        }
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
        let dataset = Dataset::parse(&request.dataset).ok_or_else(|| Stop::internal(format!("unknown dataset {:?}", request.dataset)))?;
        self.authorised().await?;
        let plan = match stored::plan_of(job).map_err(Stop::internal)? {
            Some(plan) => plan,
            None => {
                let found = self.validate(dataset, request.on_error, request.max_errors).await?;
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
        let last = self.apply(dataset, request.mode, request.on_error, &plan).await?;
        let report = import_report::write(self.ctx, self.store, job, Ending::Released).await?;
        self.fault("import_before_release")?;
        self.checkpoint()?;
        let artifact = Artifact { key: report.key.clone(), sha256: report.sha256.clone(), bytes: report.bytes, rows: plan.rows, bundle_digest: None };
        let by = Mover::Worker(&self.ctx.worker_id);
        let released = transitions::release(&self.ctx.db, job, &artifact, self.ctx.config.artifact_ttl, Authority::Import, by, &self.ctx.faults)
            .await
            .map_err(Stop::internal)?
            .map_err(Stop::refused)?;
        self.ctx.metrics.rows_imported.inc_by(if request.mode == ImportMode::Apply { last.applied() as u64 } else { 0 });
        self.ctx.metrics.rows_rejected.inc_by((plan.invalid + last.refused) as u64);
        Ok(released)
    }

    /// The file's rows by `dataset`'s header.
    fn rows(&self, dataset: Dataset) -> Result<Rows, Stop> {
        let resolved = resolved_of(self.job).map_err(Stop::internal)?;
        Ok(import_file::rows(self.store, &resolved.object_key, dataset))
    }

    /// The keys the file carries more than once (as 64-bit digests of the key), found in sorted
    /// runs on disk, so the memory it takes does not grow with the file.
    async fn duplicated_keys(&self, dataset: Dataset) -> Result<Result<HashSet<u64>, Problem>, Stop> {
        let mut runs = KeyRuns::default();
        let mut reader = self.rows(dataset)?;
        loop {
            match reader.next().await? {
                Next::Rows(rows) => {
                    for row in rows {
                        if let Some(key) = row.key() {
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
    /// key, and the references the database must hold (orders' customers). Only the validating
    /// phase checks them; the applying phase meets a reference gone since as a refusal, so a row
    /// keeps the verdict its validation gave it.
    async fn refine(&self, dataset: Dataset, rows: &mut [Row], duplicated: &HashSet<u64>) -> Result<(), Stop> {
        for row in rows.iter_mut() {
            if let Some(key) = row.key() {
                if duplicated.contains(&digest64(&key)) {
                    let column = dataset.columns()[0].name;
                    row.problems.push(Problem { column: column.into(), code: "duplicate_key", message: "this key appears more than once in the file".into() });
                }
            }
        }
        if dataset == Dataset::Orders {
            let wanted: Vec<String> = rows.iter().filter_map(|r| r.text("customer_email").map(migrations::email_key)).collect();
            let known = customer_ids(&self.ctx.db, &self.job.tenant_id, &wanted).await.map_err(Stop::internal)?;
            for row in rows.iter_mut() {
                if let Some(email) = row.text("customer_email") {
                    if !known.contains_key(&migrations::email_key(email)) {
                        row.problems.push(Problem { column: "customer_email".into(), code: "unknown_customer", message: "no customer of yours has this email".into() });
                    }
                }
            }
        }
        Ok(())
    }

    /// The validating phase: every record checked, the errors written to a report.
    async fn validate(&self, dataset: Dataset, on_error: OnError, max_errors: Option<u64>) -> Result<Plan, Stop> {
        let duplicated = match self.duplicated_keys(dataset).await? {
            Ok(d) => d,
            Err(p) => return Ok(invalid_file(p)),
        };
        let staging = crate::storage::staging_part_key(&self.job.id, self.job.generation, VALIDATION_REPORT);
        let mut report = import_report::ReportWriter::start(self.store, &staging).map_err(Stop::internal)?;
        let (mut rows_n, mut invalid, mut first) = (0i64, 0i64, Vec::new());
        let mut reader = self.rows(dataset)?;
        loop {
            let mut rows = match reader.next().await? {
                Next::Rows(rows) => rows,
                Next::End => break,
                Next::Invalid(p) => return Ok(invalid_file(p)),
            };
            self.refine(dataset, &mut rows, &duplicated).await?;
            for row in &rows {
                rows_n += 1;
                if !row.problems.is_empty() {
                    invalid += 1;
                    for p in &row.problems {
                        if first.len() < FIRST_ERRORS {
                            first.push(RowError { line: row.record.line, column: p.column.clone(), code: p.code.into(), message: p.message.clone() });
                        }
                        report.row(row.record.line, &p.column, p.code, &p.message, &row.record.cells).await.map_err(Stop::storage)?;
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
        })
    }

    /// The applying phase: the valid records after the last committed batch, in batches.
    async fn apply(&self, dataset: Dataset, mode: ImportMode, on_error: OnError, plan: &Plan) -> Result<Mark, Stop> {
        // The rows the validation found invalid (a duplicated key among them) are those its
        // report names, read beside the file in line order: the file is not searched again.
        let mut invalid = match &plan.report {
            Some(file) if plan.invalid > 0 => Entries::open(self.store, &file.key),
            _ => Entries::none(),
        };
        let start = stored::last_mark(&self.ctx.db, &self.job.id).await.map_err(Stop::internal)?;
        self.lease.wrote(start.last_record);
        let mut state = Applying { seq: self.job.checkpoint_seq, last: start, pending: Vec::new() };
        let batch_rows = self.ctx.config.import_batch_rows as usize;
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
                let known = invalid.take(row.record.line).await?;
                if !known.is_empty() && row.problems.is_empty() {
                    row.problems.push(Problem { column: String::new(), code: "invalid", message: "invalid when the file was validated".into() });
                }
                state.pending.push(row);
                if state.pending.len() >= batch_rows {
                    self.batch(dataset, mode, on_error, &mut state).await?;
                }
            }
            self.checkpoint()?;
        }
        if !state.pending.is_empty() {
            self.batch(dataset, mode, on_error, &mut state).await?;
        }
        Ok(state.last)
    }

    /// Applies (or, in a dry run, tries and rolls back) the pending rows as one batch with its
    /// checkpoint. A bounded wait (a lock held past `lock_timeout`, a deadlock, a serialization
    /// failure, SQLite's busy timeout) rolls the batch back and runs it again after a pause:
    /// nothing moved, so nothing is counted, and the stall rule bounds how long it may go on.
    async fn batch(&self, dataset: Dataset, mode: ImportMode, on_error: OnError, state: &mut Applying) -> Result<(), Stop> {
        let mut waits = 0u32;
        loop {
            match self.try_batch(dataset, mode, on_error, state).await? {
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
    async fn try_batch(&self, dataset: Dataset, mode: ImportMode, on_error: OnError, state: &Applying) -> Result<Option<Mark>, Stop> {
        self.fault("import_before_batch")?;
        self.checkpoint()?;
        self.authorised().await?;
        let Some(last_record) = state.pending.last().map(|r| r.record.number) else { return Ok(Some(state.last)) };
        let seq = state.seq + 1;
        let mut mark = state.last;
        mark.last_record = last_record;
        let mut refused = Vec::new();
        match self.write_batch(dataset, mode, on_error, &state.pending, seq, &mut mark, &mut refused).await {
            Ok(Written::Committed) => {
                self.lease.wrote(last_record);
                Ok(Some(mark))
            }
            Ok(Written::Refused(refusal)) => Err(Stop::refused(refusal)),
            Ok(Written::Faulted) => Err(Stop::storage("a fault point stopped the batch before its commit")),
            Ok(Written::RolledBackUnderAbort) => {
                // The report lists them all the same: recorded past the last checkpoint, as a
                // batch that did not commit.
                stored::record_refusals(&self.ctx.db, &self.job.id, seq, &refused).await.map_err(Stop::internal)?;
                Err(Stop::Failed { failure: Failure::APPLY_FAILED, detail: format!("{} row(s) refused in batch {seq}", refused.len()) })
            }
            Err(e) if crate::db::is_busy(&e) => Ok(None),
            Err(e) => Err(Stop::internal(e)),
        }
    }

    /// The batch's transaction: its fenced checkpoint (an apply's is opened first, so the job's
    /// row is this attempt's for the whole batch), its rows, the rows refused, and its commit.
    #[allow(clippy::too_many_arguments)]
    async fn write_batch(&self, dataset: Dataset, mode: ImportMode, on_error: OnError, rows: &[Row], seq: i32, mark: &mut Mark, refused: &mut Vec<Refused>) -> Result<Written, DbErr> {
        let txn = begin_write(&self.ctx.db).await?;
        let opened = if mode == ImportMode::Apply {
            match checkpoints::open_step(&txn, self.job, seq, mark.last_record, Some(Authority::Import.condition())).await? {
                Some(row) => Some(row),
                None => {
                    txn.rollback().await?;
                    return Ok(Written::Refused(checkpoints::refusal(&self.ctx.db, self.job).await?));
                }
            }
        } else {
            None
        };
        write_rows(&txn, dataset, &self.job.tenant_id, rows, mark, refused).await?;
        if on_error == OnError::Abort && !refused.is_empty() {
            txn.rollback().await?;
            return Ok(Written::RolledBackUnderAbort);
        }
        let payload = serde_json::to_value(&*mark).map_err(|e| DbErr::Custom(e.to_string()))?;
        let (txn, row) = match opened {
            Some(row) => (txn, row),
            // A dry run writes nothing of its rows: its checkpoint goes in a transaction of its own.
            None => {
                txn.rollback().await?;
                let txn = begin_write(&self.ctx.db).await?;
                match checkpoints::open_step(&txn, self.job, seq, mark.last_record, None).await? {
                    Some(row) => (txn, row),
                    None => {
                        txn.rollback().await?;
                        return Ok(Written::Refused(checkpoints::refusal(&self.ctx.db, self.job).await?));
                    }
                }
            }
        };
        stored::record_refusals(&txn, &self.job.id, seq, refused).await?;
        checkpoints::close_step(&txn, self.job, &row, seq, &payload, Mover::Worker(&self.ctx.worker_id)).await?;
        if self.ctx.faults.check("import_batch_before_commit", &self.job.id).is_err() {
            txn.rollback().await?;
            return Ok(Written::Faulted);
        }
        txn.commit().await?;
        Ok(Written::Committed)
    }
}

/// Whether `stop` ends the import for good rather than for a later attempt: a cancel, a
/// permanent failure, or a transient one with no attempt left (the attempt's own
/// transition decides the same way; a report recorded before a move that went otherwise is
/// replaced at the release, or cleared by a redrive).
fn ends_for_good(stop: &Stop, job: &jobs::Model, max_attempts: i32) -> bool {
    match stop {
        Stop::CancelRequested | Stop::Revoked => true,
        Stop::Failed { failure, .. } => !failure.transient || job.attempt >= max_attempts,
        Stop::Stalled => job.attempt >= max_attempts,
        Stop::Lost | Stop::Shutdown => false,
    }
}

/// The plan of a file that cannot be read as the dataset's CSV.
fn invalid_file(p: Problem) -> Plan {
    Plan {
        rows: 0,
        valid: 0,
        invalid: 0,
        first_errors: vec![RowError { line: 1, column: p.column, code: p.code.into(), message: p.message }],
        report: None,
        fails: Some(Failure::INVALID_FILE.code.to_owned()),
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

/// The ids of the tenant's customers with these email keys.
async fn customer_ids<C: ConnectionTrait>(db: &C, tenant_id: &str, keys: &[String]) -> Result<HashMap<String, i64>, sea_orm::DbErr> {
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    let found = customers::Entity::find()
        .filter(customers::Column::TenantId.eq(tenant_id))
        .filter(customers::Column::EmailKey.is_in(keys.iter().cloned()))
        .all(db)
        .await?;
    Ok(found.into_iter().map(|c| (c.email_key, c.id)).collect())
}

/// Whether an instant stored in ms equals a file's instant at the file's precision.
fn same_instant(stored_ms: i64, file_ms: i64, file_has_fraction: bool) -> bool {
    if file_has_fraction { stored_ms == file_ms } else { stored_ms.div_euclid(1000) == file_ms.div_euclid(1000) }
}

/// Classifies and writes `rows` inside `txn`. The batch's inserts go as one multi-row insert
/// and its updates after it, under one savepoint; if the database refuses any of it, that
/// savepoint is rolled back and each row is written under a savepoint of its own, so a refused
/// row is reported without losing the others.
async fn write_rows(txn: &DatabaseTransaction, dataset: Dataset, tenant_id: &str, rows: &[Row], mark: &mut Mark, refused: &mut Vec<Refused>) -> Result<(), sea_orm::DbErr> {
    let valid: Vec<&Row> = rows.iter().filter(|r| r.problems.is_empty()).collect();
    let backend = txn.get_database_backend();
    let postgres = backend == sea_orm::DbBackend::Postgres;
    match dataset {
        Dataset::Customers => {
            let keys: Vec<String> = valid.iter().filter_map(|r| r.key()).collect();
            let lookup = customers::Entity::find().filter(customers::Column::TenantId.eq(tenant_id)).filter(customers::Column::EmailKey.is_in(keys));
            let existing: HashMap<String, customers::Model> = planned_afresh(txn, postgres, lookup.all(txn)).await?.into_iter().map(|c| (c.email_key.clone(), c)).collect();
            let ops: Vec<(&Row, Op<customers::ActiveModel>)> =
                valid.iter().filter_map(|row| row.key().map(|key| (*row, plan_customer(backend, tenant_id, row, &key, existing.get(&key))))).collect();
            run_ops::<customers::Entity>(txn, ops, mark, refused).await?;
        }
        Dataset::Orders => {
            let refs: Vec<String> = valid.iter().filter_map(|r| r.key()).collect();
            let lookup = orders::Entity::find().filter(orders::Column::TenantId.eq(tenant_id)).filter(orders::Column::OrderRef.is_in(refs));
            let existing: HashMap<String, orders::Model> = planned_afresh(txn, postgres, lookup.all(txn))
                .await?
                .into_iter()
                .filter_map(|o| o.order_ref.clone().map(|r| (r, o)))
                .collect();
            let emails: Vec<String> = valid.iter().filter_map(|r| r.text("customer_email").map(migrations::email_key)).collect();
            let ids = customer_ids(txn, tenant_id, &emails).await?;
            let mut touched: HashSet<i64> = HashSet::new();
            let mut ops = Vec::with_capacity(valid.len());
            for row in valid {
                let Some(key) = row.key() else { continue };
                let customer = row.text("customer_email").and_then(|e| ids.get(&migrations::email_key(e)).copied());
                let before = existing.get(&key);
                let op = plan_order(backend, tenant_id, row, &key, before, customer);
                if matches!(op, Op::Insert(_) | Op::Update(_)) {
                    touched.extend(customer);
                    touched.extend(before.map(|o| o.customer_id));
                }
                ops.push((row, op));
            }
            run_ops::<orders::Entity>(txn, ops, mark, refused).await?;
            if !touched.is_empty() {
                recompute_totals(txn, tenant_id, &touched).await?;
            }
        }
    }
    Ok(())
}

/// Runs a batch's lookup by key with a plan made for it, on PostgreSQL. The lookup is a prepared
/// statement, and a generic plan made while the table was small scans it whole, while the import
/// keeps it growing: batches then took seconds each. Only the lookup is planned afresh; the
/// batch's insert keeps its cached plan.
async fn planned_afresh<T>(txn: &DatabaseTransaction, postgres: bool, lookup: impl std::future::Future<Output = Result<T, sea_orm::DbErr>>) -> Result<T, sea_orm::DbErr> {
    if !postgres {
        return lookup.await;
    }
    txn.execute_unprepared("SET LOCAL plan_cache_mode = force_custom_plan").await?;
    let found = lookup.await;
    txn.execute_unprepared("SET LOCAL plan_cache_mode = auto").await?;
    found
}

/// What a row does to its record.
enum Op<A> {
    /// Nothing: every settable column the file has equals the stored value.
    Unchanged,
    /// A new record.
    Insert(A),
    /// The record changes.
    Update(sea_orm::Statement),
    /// The row cannot be written (the database would refuse it): why.
    Refuse(&'static str),
}

/// Runs a batch's operations: all together under one savepoint, else one savepoint per row. A
/// bounded wait is no verdict on a row: it ends the batch (its caller runs it again).
async fn run_ops<E>(txn: &DatabaseTransaction, ops: Vec<(&Row, Op<E::ActiveModel>)>, mark: &mut Mark, refused: &mut Vec<Refused>) -> Result<(), sea_orm::DbErr>
where
    E: EntityTrait,
    E::ActiveModel: sea_orm::ActiveModelTrait<Entity = E> + Clone + Send,
{
    let together = !ops.iter().any(|(_, op)| matches!(op, Op::Refuse(_)));
    if together {
        let inserts: Vec<E::ActiveModel> = ops.iter().filter_map(|(_, op)| if let Op::Insert(a) = op { Some(a.clone()) } else { None }).collect();
        let nested = txn.begin().await?;
        let mut all = if inserts.is_empty() { Ok(()) } else { E::insert_many(inserts).exec_without_returning(&nested).await.map(|_| ()) };
        for (_, op) in &ops {
            if let (Ok(()), Op::Update(stmt)) = (&all, op) {
                all = nested.execute_raw(stmt.clone()).await.map(|_| ());
            }
        }
        let together = settle(nested, all).await;
        if let Err(e) = &together {
            if crate::db::is_busy(e) {
                return together;
            }
        }
        if together.is_ok() {
            for (row, op) in &ops {
                let change = match op {
                    Op::Insert(_) => Change::Created,
                    Op::Update(_) => Change::Updated,
                    _ => Change::Unchanged,
                };
                count(Ok(change), row, mark, refused);
            }
            return Ok(());
        }
    }
    for (row, op) in ops {
        let outcome = match op {
            Op::Unchanged => Ok(Change::Unchanged),
            Op::Refuse(why) => Err(why),
            Op::Insert(a) => {
                let nested = txn.begin().await?;
                let done = E::insert(a).exec_without_returning(&nested).await.map(|_| Change::Created);
                verdict(settle(nested, done).await, row)?
            }
            Op::Update(stmt) => {
                let nested = txn.begin().await?;
                let done = nested.execute_raw(stmt).await.map(|_| Change::Updated);
                verdict(settle(nested, done).await, row)?
            }
        };
        count(outcome, row, mark, refused);
    }
    Ok(())
}

/// What the database's answer to one row means: its change, or why it was refused; a bounded
/// wait is no verdict, and is passed up.
fn verdict(answer: Result<Change, sea_orm::DbErr>, row: &Row) -> Result<Result<Change, &'static str>, sea_orm::DbErr> {
    match answer {
        Ok(change) => Ok(Ok(change)),
        Err(e) if crate::db::is_busy(&e) => Err(e),
        Err(e) => {
            tracing::info!(line = row.record.line, error = %e, "a row the database refused");
            Ok(Err("the database refused this row"))
        }
    }
}

fn count(outcome: Result<Change, &'static str>, row: &Row, mark: &mut Mark, refused: &mut Vec<Refused>) {
    match outcome {
        Ok(Change::Created) => mark.created += 1,
        Ok(Change::Updated) => mark.updated += 1,
        Ok(Change::Unchanged) => mark.unchanged += 1,
        Err(why) => {
            mark.refused += 1;
            refused.push(Refused { record: row.record.number, line: row.record.line, message: why.to_owned() });
        }
    }
}

/// What a row did to its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Created,
    Updated,
    Unchanged,
}

/// Ends a savepoint: kept when what ran under it succeeded, else rolled back, so a refused row
/// undoes only its own writes.
async fn settle<T>(nested: DatabaseTransaction, result: Result<T, sea_orm::DbErr>) -> Result<T, sea_orm::DbErr> {
    match result {
        Ok(v) => {
            nested.commit().await?;
            Ok(v)
        }
        Err(e) => {
            nested.rollback().await?;
            Err(e)
        }
    }
}

fn plan_customer(backend: sea_orm::DbBackend, tenant_id: &str, row: &Row, key: &str, before: Option<&customers::Model>) -> Op<customers::ActiveModel> {
    use sea_orm::QueryTrait;
    let text = |name: &str| row.text(name).map(str::to_owned);
    match before {
        Some(c) => {
            let changed = [("email", &c.email), ("name", &c.name), ("phone", &c.phone), ("country", &c.country)]
                .iter()
                .any(|(name, stored)| row.has(name) && text(name).as_deref() != Some(stored.as_str()));
            if !changed {
                return Op::Unchanged;
            }
            let mut update = customers::Entity::update_many().filter(customers::Column::Id.eq(c.id));
            for (name, col) in [("email", customers::Column::Email), ("name", customers::Column::Name), ("phone", customers::Column::Phone), ("country", customers::Column::Country)] {
                if let Some(v) = text(name) {
                    update = update.col_expr(col, Expr::val(v));
                }
            }
            Op::Update(update.build(backend))
        }
        // A new record needs every column an export writes and an import checks (a file without
        // them could not be imported back); the others the file does not have are empty.
        None => {
            let Some(country) = text("country") else { return Op::Refuse("a new customer needs a country") };
            Op::Insert(customers::ActiveModel {
            id: NotSet,
            tenant_id: Set(tenant_id.to_owned()),
            name: Set(text("name").unwrap_or_default()),
            email: Set(text("email").unwrap_or_default()),
            email_key: Set(key.to_owned()),
            phone: Set(text("phone").unwrap_or_default()),
            country: Set(country),
            created_at: Set(jiff::Timestamp::now().as_millisecond()),
            lifetime_total_cents: Set(0),
        })
        }
    }
}

fn plan_order(backend: sea_orm::DbBackend, tenant_id: &str, row: &Row, key: &str, before: Option<&orders::Model>, customer: Option<i64>) -> Op<orders::ActiveModel> {
    use sea_orm::QueryTrait;
    let text = |name: &str| row.text(name).map(str::to_owned);
    let (instant, fraction) = row
        .values
        .iter()
        .find_map(|(r, v)| match v {
            Value::Instant(ms, fraction) if r.name == "placed_at" => Some((Some(*ms), *fraction)),
            _ => None,
        })
        .unwrap_or((None, false));
    let cents = row.values.iter().find_map(|(_, v)| match v {
        Value::Cents(c) => Some(*c),
        _ => None,
    });
    if row.has("customer_email") && customer.is_none() {
        return Op::Refuse("no customer of yours has this email (any more)");
    }
    match before {
        Some(o) => {
            let mut changed = false;
            let mut update = orders::Entity::update_many().filter(orders::Column::Id.eq(o.id));
            for (name, col, stored) in [("country", orders::Column::Country, &o.country), ("status", orders::Column::Status, &o.status), ("currency", orders::Column::Currency, &o.currency), ("notes", orders::Column::Notes, &o.notes)] {
                if let Some(v) = text(name) {
                    changed |= v != *stored;
                    update = update.col_expr(col, Expr::val(v));
                }
            }
            if let Some(ms) = instant {
                changed |= !same_instant(o.placed_at, ms, fraction);
                update = update.col_expr(orders::Column::PlacedAt, Expr::val(ms));
            }
            if let Some(c) = cents {
                changed |= c != o.total_cents;
                update = update.col_expr(orders::Column::TotalCents, Expr::val(c));
            }
            if let Some(id) = customer {
                changed |= id != o.customer_id;
                update = update.col_expr(orders::Column::CustomerId, Expr::val(id));
            }
            if changed { Op::Update(update.build(backend)) } else { Op::Unchanged }
        }
        None => {
            let (Some(customer_id), Some(placed_at), Some(status), Some(total_cents), Some(country), Some(currency)) =
                (customer, instant, text("status"), cents, text("country"), text("currency"))
            else {
                return Op::Refuse("a new order needs customer_email, placed_at, status, total, country and currency");
            };
            Op::Insert(orders::ActiveModel {
                id: NotSet,
                tenant_id: Set(tenant_id.to_owned()),
                customer_id: Set(customer_id),
                placed_at: Set(placed_at),
                country: Set(country),
                status: Set(status),
                total_cents: Set(total_cents),
                currency: Set(currency),
                notes: Set(text("notes").unwrap_or_default()),
                order_ref: Set(Some(key.to_owned())),
            })
        }
    }
}

/// Sets the lifetime total of these customers from their orders, in the batch's transaction.
async fn recompute_totals(txn: &DatabaseTransaction, tenant_id: &str, ids: &HashSet<i64>) -> Result<(), sea_orm::DbErr> {
    let list = ids.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
    let tenant = tenant_id.replace('\'', "''");
    let sql = format!(
        "UPDATE customers SET lifetime_total_cents = (SELECT COALESCE(SUM(o.total_cents), 0) FROM orders o WHERE o.tenant_id = customers.tenant_id AND o.customer_id = customers.id) \
         WHERE tenant_id = '{tenant}' AND id IN ({list})"
    );
    txn.execute_unprepared(&sql).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instant_without_a_fraction_compares_to_the_second() {
        assert!(same_instant(1_769_841_000_999, 1_769_841_000_000, false));
        assert!(!same_instant(1_769_841_000_999, 1_769_841_000_000, true));
        assert!(!same_instant(1_769_841_001_000, 1_769_841_000_000, false));
    }

}
