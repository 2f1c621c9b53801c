//! One attempt at an import (SPEC §10). Its first attempt validates the whole file — every
//! record, before anything is written — writes the errors to a report and fixes what it found as
//! the job's checkpoint plan, so no later attempt validates again. Then, unless its policy fails
//! it, it applies the valid records in batches: each batch is one transaction holding the fenced
//! checkpoint of the batch (the job's row, this generation, running, the actor still an admin)
//! and the batch's upserts, so a batch commits exactly once and a lost worker's batch commits
//! nothing; a later attempt continues after the last committed record. A dry run does the same
//! work in transactions it rolls back, and records its checkpoints apart. The report (every
//! error in input order, and for a failed or cancelled import the rows not applied) is the
//! job's artifact.

use super::attempt::{begin, end, Stop};
use super::duplicate_keys::KeyRuns;
use crate::entities::{customers, jobs, orders};
use crate::imports::datasets::{read_cell, CellKind, ColumnRule, Dataset, Header, Problem, Value};
use crate::imports::stored::{request_of, resolved_of, Mark, Plan, ReportFile};
use crate::job_store::authority::Authority;
use crate::job_store::transitions::{self, Artifact, Failure};
use crate::job_store::{begin_write, checkpoints, Mover};
use crate::storage::{staging_part_key, ExportStore, StagingUpload};
use crate::worker::csv_cells::defuse;
use crate::worker::lease::Lease;
use crate::worker::WorkerContext;
use app::{ImportMode, OnError, RowError};
use futures::StreamExt;
use object_store::path::Path;
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveValue::NotSet, ColumnTrait, ConnectionTrait, DatabaseTransaction, EntityTrait, QueryFilter, Set, TransactionTrait};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

/// Records handed from the parsing thread at a time.
const CHUNK: usize = 512;
/// Errors kept in the view.
const FIRST_ERRORS: usize = 10;
/// The staging objects of an attempt: the validation's report, and the final one.
const VALIDATION_REPORT: i32 = 1;
const FINAL_REPORT: i32 = 2;

/// Runs one claimed import to the end of its attempt.
pub async fn run(ctx: &WorkerContext, job: jobs::Model) {
    let Some(lease) = begin(ctx, &job).await else { return };
    let store = ctx.stores.for_deployment(&ctx.db, &job.deployment).await;
    let result = match &store {
        Ok(store) => {
            let attempt = Attempt { ctx, job: &job, store, lease: &lease, refused_in_failed_batch: Default::default() };
            // A cancel is met at the next batch, where the report of the rows not applied is
            // written; a lost lease or a stall ends the attempt wherever it waits.
            tokio::select! {
                biased;
                result = attempt.run() => result,
                holding = lease.lost() => Err(Stop::interrupted(holding)),
            }
        }
        Err(e) => Err(Stop::storage(e)),
    };
    drop(lease);
    end(ctx, &job, result).await;
    if let Ok(store) = store {
        for key in [staging_part_key(&job.id, job.generation, VALIDATION_REPORT), staging_part_key(&job.id, job.generation, FINAL_REPORT)] {
            let _ = store.delete(&key).await;
        }
    }
}

struct Attempt<'a> {
    ctx: &'a WorkerContext,
    job: &'a jobs::Model,
    store: &'a ExportStore,
    lease: &'a Lease,
    /// The refused rows of a batch rolled back under `abort`, for the report.
    refused_in_failed_batch: std::sync::Mutex<Vec<RowError>>,
}

/// One record of the file: where it starts and its cells as the file has them.
#[derive(Debug, Clone)]
struct Record {
    /// 1-based among the data records.
    number: i64,
    /// The physical line where it starts (the header is line 1).
    line: i64,
    cells: Vec<String>,
}

/// A record read by the header's rules.
#[derive(Debug, Clone)]
struct Row {
    record: Record,
    /// The settable columns the file has, with their values.
    values: Vec<(ColumnRule, Value)>,
    problems: Vec<Problem>,
}

impl Row {
    /// The record's key, when its key cell is valid (read first, so it is the first value).
    fn key(&self) -> Option<String> {
        match self.values.first() {
            Some((rule, Value::Text(t))) if rule.name == "email" => Some(migrations::email_key(t)),
            Some((rule, Value::Text(t))) if rule.name == "order_ref" => Some(t.clone()),
            _ => None,
        }
    }

    fn text(&self, name: &str) -> Option<&str> {
        self.values.iter().find_map(|(r, v)| match v {
            Value::Text(t) if r.name == name => Some(t.as_str()),
            _ => None,
        })
    }

    fn has(&self, name: &str) -> bool {
        self.values.iter().any(|(r, _)| r.name == name)
    }
}

/// What reading the file gave: the header, then chunks of records, or a whole-file error.
enum Read {
    Header(Vec<String>),
    Records(Vec<Record>),
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

    async fn run(&self) -> Result<Box<jobs::Model>, Stop> {
        let job = self.job;
        self.fault("after_claim")?;
        self.checkpoint()?;
        let request = request_of(job).map_err(Stop::internal)?;
        let dataset = Dataset::parse(&request.dataset).ok_or_else(|| Stop::internal(format!("unknown dataset {:?}", request.dataset)))?;
        match self.authorised().await {
            Err(Stop::Revoked) => return Err(Stop::Failed { failure: Failure::IMPORT_REVOKED, detail: "the actor may no longer import".into() }),
            other => other?,
        }
        let plan = match crate::imports::stored::plan_of(job).map_err(Stop::internal)? {
            Some(plan) => plan,
            None => {
                let found = match self.validate(dataset, request.on_error, request.max_errors).await {
                    Ok(found) => found,
                    // Cancelled before the file was checked through: nothing was applied, so the
                    // report lists every row as not applied (SPEC §10), like a cancel between
                    // batches.
                    Err(Stop::CancelRequested) => return Err(self.cancel_with_report(&Plan::default(), dataset).await),
                    Err(other) => return Err(other),
                };
                let text = serde_json::to_string(&found).map_err(Stop::internal)?;
                let fixed = checkpoints::fix_plan(&self.ctx.db, job, &text).await.map_err(Stop::internal)?.map_err(Stop::refused)?;
                serde_json::from_str(&fixed).map_err(Stop::internal)?
            }
        };
        if let Some(code) = &plan.fails {
            let failure = if code == Failure::INVALID_FILE.code { Failure::INVALID_FILE } else { Failure::VALIDATION_FAILED };
            return Err(self.fail_with_report(&plan, dataset, failure, None).await);
        }
        let applied = self.apply(dataset, request.mode, request.on_error, &plan).await;
        let last = match applied {
            Ok(last) => last,
            Err(Stop::Failed { failure, detail }) if failure == Failure::APPLY_FAILED => {
                tracing::warn!(job = %job.id, detail, "a row was refused under abort");
                return Err(self.fail_with_report(&plan, dataset, failure, Some(detail)).await);
            }
            Err(Stop::Revoked) => return Err(self.fail_with_report(&plan, dataset, Failure::IMPORT_REVOKED, None).await),
            Err(Stop::CancelRequested) => return Err(self.cancel_with_report(&plan, dataset).await),
            Err(other) => return Err(other),
        };
        let report = self.write_report(dataset, &plan, None, &last.refused_rows).await?;
        self.checkpoint()?;
        // The job's progress then shows the file's records, done.
        let artifact = Artifact { key: report.key.clone(), sha256: report.sha256.clone(), bytes: report.bytes, rows: plan.rows, bundle_digest: None };
        let by = Mover::Worker(&self.ctx.worker_id);
        let released = transitions::release(&self.ctx.db, job, &artifact, self.ctx.config.artifact_ttl, Authority::Import, by, &self.ctx.faults)
            .await
            .map_err(Stop::internal)?
            .map_err(Stop::refused)?;
        self.ctx.metrics.rows_imported.inc_by(if request.mode == ImportMode::Apply { last.mark.applied() as u64 } else { 0 });
        self.ctx.metrics.rows_rejected.inc_by((plan.invalid + last.mark.refused) as u64);
        Ok(released)
    }

    /// Writes the final report (with the rows not applied) as the job's artifact, then ends the
    /// attempt's work as cancelled. `plan` is the checked file's, or the empty plan of a file the
    /// cancel stopped before it was checked through (every row then reported not applied).
    async fn cancel_with_report(&self, plan: &Plan, dataset: Dataset) -> Stop {
        self.attach_final_report(plan, dataset).await;
        Stop::CancelRequested
    }

    /// Writes the final report (with the rows not applied) as the job's artifact, then ends the
    /// attempt's work with `failure`.
    async fn fail_with_report(&self, plan: &Plan, dataset: Dataset, failure: Failure, detail: Option<String>) -> Stop {
        self.attach_final_report(plan, dataset).await;
        Stop::Failed { failure, detail: detail.unwrap_or_else(|| failure.code.to_owned()) }
    }

    /// Writes the report of an import that stops before its end — every error, and the rows
    /// not applied — and records it as the job's artifact.
    async fn attach_final_report(&self, plan: &Plan, dataset: Dataset) {
        let mut refused = self.refused_so_far().await.unwrap_or_default();
        if let Ok(mut pending) = self.refused_in_failed_batch.lock() {
            refused.append(&mut pending);
        }
        let applied_through = self.last_mark().await.map(|m| m.last_record).unwrap_or(0);
        match self.write_report(dataset, plan, Some(applied_through), &refused).await {
            Ok(report) => {
                let artifact = Artifact { key: report.key, sha256: report.sha256, bytes: report.bytes, rows: report.rows, bundle_digest: None };
                if let Err(e) = transitions::attach_artifact(&self.ctx.db, self.job, &artifact, self.ctx.config.artifact_ttl).await {
                    tracing::warn!(job = %self.job.id, error = %e, "the report of a failed import was not recorded");
                }
            }
            Err(e) => tracing::warn!(job = %self.job.id, error = ?e, "the report of a failed import was not written"),
        }
    }

    async fn last_mark(&self) -> Option<Mark> {
        let last = checkpoints::last_of(&self.ctx.db, &self.job.id).await.ok()??;
        serde_json::from_str(&last.payload).ok()
    }

    /// The errors of the rows the database refused, as the last committed batch carries them
    /// (each batch's checkpoint carries every refused row so far).
    async fn refused_so_far(&self) -> Result<Vec<RowError>, Stop> {
        Ok(self.last_payload().await?.refused_rows)
    }

    /// Reads the upload, in a blocking thread, into chunks of records sent as they are parsed.
    fn read(&self) -> Result<tokio::sync::mpsc::Receiver<Result<Read, Problem>>, Stop> {
        let resolved = resolved_of(self.job).map_err(Stop::internal)?;
        let objects = self.store.objects().clone();
        let key = Path::from(resolved.object_key.as_str());
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        let handle = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            let stream = handle.block_on(async { objects.get(&key).await.map(|r| r.into_stream()) });
            let stream = match stream {
                Ok(s) => s.map(|chunk| chunk.map_err(std::io::Error::other)),
                Err(e) => {
                    let _ = tx.blocking_send(Err(Problem { column: String::new(), code: "storage", message: e.to_string() }));
                    return;
                }
            };
            let reader = tokio_util::io::SyncIoBridge::new_with_handle(tokio_util::io::StreamReader::new(stream), handle);
            parse(reader, &tx);
        });
        Ok(rx)
    }

    /// A reader of the file's records by the header's rules.
    fn rows(&self, dataset: Dataset) -> Result<Rows, Stop> {
        Ok(Rows { rx: self.read()?, header: None, dataset })
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
            Err(p) => return self.invalid_file(p).await,
        };
        let staging = staging_part_key(&self.job.id, self.job.generation, VALIDATION_REPORT);
        let mut report = ReportWriter::start(self.store, &staging).map_err(Stop::internal)?;
        let (mut rows_n, mut invalid, mut first) = (0i64, 0i64, Vec::new());
        let mut reader = self.rows(dataset)?;
        loop {
            let mut rows = match reader.next().await? {
                Next::Rows(rows) => rows,
                Next::End => break,
                Next::Invalid(p) => return self.invalid_file(p).await,
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
        self.lease.counted(rows_n);
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

    /// The plan of a file that cannot be read as the dataset's CSV.
    async fn invalid_file(&self, p: Problem) -> Result<Plan, Stop> {
        Ok(Plan {
            rows: 0,
            valid: 0,
            invalid: 0,
            first_errors: vec![RowError { line: 1, column: p.column, code: p.code.into(), message: p.message }],
            report: None,
            fails: Some(Failure::INVALID_FILE.code.to_owned()),
        })
    }

    /// The applying phase: the valid records after the last committed batch, in batches.
    async fn apply(&self, dataset: Dataset, mode: ImportMode, on_error: OnError, plan: &Plan) -> Result<BatchPayload, Stop> {
        // The rows the validation found invalid (a duplicated key among them) are those its
        // report names: the file is not searched for duplicates again.
        let invalid_lines = self.invalid_lines(plan).await?;
        let start = self.last_payload().await?;
        let seq0 = self.job.checkpoint_seq;
        let mut state = Applying { seq: seq0, last: start.clone(), pending: Vec::new() };
        let batch_rows = self.ctx.config.import_batch_rows as usize;
        let mut reader = self.rows(dataset)?;
        loop {
            let rows = match reader.next().await? {
                Next::Rows(rows) => rows,
                Next::End => break,
                Next::Invalid(p) => return Err(Stop::invalid_data(p.message)),
            };
            for mut row in rows {
                if row.record.number <= state.last.mark.last_record {
                    continue;
                }
                if invalid_lines.contains(&row.record.line) && row.problems.is_empty() {
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

    /// The lines of the records the validation found invalid, from its report.
    async fn invalid_lines(&self, plan: &Plan) -> Result<HashSet<i64>, Stop> {
        let mut lines = HashSet::new();
        let Some(file) = &plan.report else { return Ok(lines) };
        let bytes = self.store.objects().get(&Path::from(file.key.as_str())).await.map_err(Stop::storage)?.bytes().await.map_err(Stop::storage)?;
        let mut reader = csv::ReaderBuilder::new().flexible(true).from_reader(&bytes[..]);
        for rec in reader.records().flatten() {
            if let Some(line) = rec.get(0).and_then(|l| l.parse::<i64>().ok()) {
                lines.insert(line);
            }
        }
        Ok(lines)
    }

    async fn last_payload(&self) -> Result<BatchPayload, Stop> {
        match checkpoints::last_of(&self.ctx.db, &self.job.id).await.map_err(Stop::internal)? {
            Some(c) => serde_json::from_str(&c.payload).map_err(Stop::internal),
            None => Ok(BatchPayload::default()),
        }
    }

    /// Applies (or, in a dry run, tries and rolls back) the pending rows as one batch with its
    /// checkpoint.
    async fn batch(&self, dataset: Dataset, mode: ImportMode, on_error: OnError, state: &mut Applying) -> Result<(), Stop> {
        self.fault("import_before_batch")?;
        self.checkpoint()?;
        self.authorised().await?;
        let rows = std::mem::take(&mut state.pending);
        let Some(last_record) = rows.last().map(|r| r.record.number) else { return Ok(()) };
        let seq = state.seq + 1;
        let txn = begin_write(&self.ctx.db).await.map_err(Stop::internal)?;
        let opened = if mode == ImportMode::Apply {
            match checkpoints::open_step(&txn, self.job, seq, last_record, Some(Authority::Import.condition())).await.map_err(Stop::internal)? {
                Some(row) => Some(row),
                None => {
                    txn.rollback().await.map_err(Stop::internal)?;
                    let refusal = checkpoints::refusal(&self.ctx.db, self.job).await.map_err(Stop::internal)?;
                    return Err(Stop::refused(refusal));
                }
            }
        } else {
            None
        };
        let mut mark = state.last.mark;
        mark.last_record = last_record;
        let mut refused_rows = Vec::new();
        let written = write_rows(&txn, dataset, &self.job.tenant_id, &rows, &mut mark, &mut refused_rows).await.map_err(Stop::internal)?;
        if on_error == OnError::Abort && !refused_rows.is_empty() {
            txn.rollback().await.map_err(Stop::internal)?;
            if let Ok(mut pending) = self.refused_in_failed_batch.lock() {
                pending.extend(refused_rows);
            }
            return Err(Stop::Failed { failure: Failure::APPLY_FAILED, detail: format!("{} row(s) refused in batch {seq}", written.refused) });
        }
        let mut payload = BatchPayload { mark, refused_rows: state.last.refused_rows.clone() };
        payload.refused_rows.extend(refused_rows);
        let json = serde_json::to_value(&payload).map_err(Stop::internal)?;
        let by = Mover::Worker(&self.ctx.worker_id);
        match opened {
            Some(row) => {
                checkpoints::close_step(&txn, self.job, &row, seq, &json, by).await.map_err(Stop::internal)?;
                if self.ctx.faults.check("import_batch_before_commit", &self.job.id).is_err() {
                    txn.rollback().await.map_err(Stop::internal)?;
                    return Err(Stop::storage("a fault point stopped the batch before its commit"));
                }
                txn.commit().await.map_err(Stop::internal)?;
            }
            None => {
                txn.rollback().await.map_err(Stop::internal)?;
                checkpoints::record(&self.ctx.db, self.job, seq, &json, last_record, by).await.map_err(Stop::internal)?.map_err(Stop::refused)?;
            }
        }
        self.lease.wrote(last_record);
        state.seq = seq;
        state.last = payload;
        Ok(())
    }

    /// Writes the report: every error of the validation's report and the refused rows in input
    /// order and, with `applied_through`, a `not_applied` row for each valid record after it.
    async fn write_report(&self, dataset: Dataset, plan: &Plan, applied_through: Option<i64>, refused: &[RowError]) -> Result<ReportFile, Stop> {
        let staging = staging_part_key(&self.job.id, self.job.generation, FINAL_REPORT);
        let mut report = ReportWriter::start(self.store, &staging).map_err(Stop::internal)?;
        if plan.fails.as_deref() == Some(Failure::INVALID_FILE.code) {
            for e in &plan.first_errors {
                report.row(e.line, &e.column, &e.code, &e.message, &[]).await.map_err(Stop::storage)?;
            }
            return report.finish(self.store, &self.job.tenant_id, &self.job.id, &staging).await.map_err(Stop::storage);
        }
        let mut validation: HashMap<i64, Vec<(String, String, String)>> = HashMap::new();
        if let Some(file) = &plan.report {
            let bytes = self.store.objects().get(&Path::from(file.key.as_str())).await.map_err(Stop::storage)?.bytes().await.map_err(Stop::storage)?;
            let mut reader = csv::ReaderBuilder::new().flexible(true).from_reader(&bytes[..]);
            for rec in reader.records().flatten() {
                if let Some(line) = rec.get(0).and_then(|l| l.parse::<i64>().ok()) {
                    validation.entry(line).or_default().push((rec.get(1).unwrap_or("").into(), rec.get(2).unwrap_or("").into(), rec.get(3).unwrap_or("").into()));
                }
            }
        }
        let mut by_line: HashMap<i64, Vec<&RowError>> = HashMap::new();
        for e in refused {
            by_line.entry(e.line).or_default().push(e);
        }
        // A file with nothing to report has a report of its header alone: it is not read again.
        if validation.is_empty() && by_line.is_empty() && applied_through.is_none() {
            return report.finish(self.store, &self.job.tenant_id, &self.job.id, &staging).await.map_err(Stop::storage);
        }
        let mut reader = self.rows(dataset)?;
        loop {
            let rows = match reader.next().await? {
                Next::Rows(rows) => rows,
                Next::End => break,
                Next::Invalid(p) => {
                    report.row(1, &p.column, p.code, &p.message, &[]).await.map_err(Stop::storage)?;
                    break;
                }
            };
            for row in rows {
                let line = row.record.line;
                let mut wrote = false;
                for (column, code, message) in validation.get(&line).into_iter().flatten() {
                    report.row(line, column, code, message, &row.record.cells).await.map_err(Stop::storage)?;
                    wrote = true;
                }
                for e in by_line.get(&line).into_iter().flatten() {
                    report.row(line, &e.column, &e.code, &e.message, &row.record.cells).await.map_err(Stop::storage)?;
                    wrote = true;
                }
                if let Some(through) = applied_through {
                    if !wrote && row.record.number > through {
                        report.row(line, "", "not_applied", "this row was not applied", &row.record.cells).await.map_err(Stop::storage)?;
                    }
                }
            }
        }
        report.finish(self.store, &self.job.tenant_id, &self.job.id, &staging).await.map_err(Stop::storage)
    }
}

/// What the next read of the file gave.
enum Next {
    /// Records, read by the header's rules.
    Rows(Vec<Row>),
    /// The end of the file.
    End,
    /// A whole-file error.
    Invalid(Problem),
}

/// The file's records, a chunk at a time, as the parsing thread sends them.
struct Rows {
    rx: tokio::sync::mpsc::Receiver<Result<Read, Problem>>,
    header: Option<Header>,
    dataset: Dataset,
}

impl Rows {
    async fn next(&mut self) -> Result<Next, Stop> {
        loop {
            let Some(next) = self.rx.recv().await else {
                return Ok(match self.header {
                    Some(_) => Next::End,
                    None => Next::Invalid(Problem { column: String::new(), code: "missing_header", message: "the file has no header row".into() }),
                });
            };
            match next {
                Ok(Read::Header(names)) => {
                    let names: Vec<&str> = names.iter().map(String::as_str).collect();
                    match Header::read(self.dataset, &names) {
                        Ok(h) => self.header = Some(h),
                        Err(p) => return Ok(Next::Invalid(p)),
                    }
                }
                Ok(Read::Records(records)) => {
                    let Some(h) = &self.header else { return Ok(Next::Invalid(Problem { column: String::new(), code: "missing_header", message: "the file has no header row".into() })) };
                    return Ok(Next::Rows(records.into_iter().map(|r| read_row(h, r)).collect()));
                }
                Err(p) if p.code == "storage" => return Err(Stop::storage(p.message)),
                Err(p) => return Ok(Next::Invalid(p)),
            }
        }
    }
}

/// A batch's checkpoint: the counts and the refused rows so far.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct BatchPayload {
    #[serde(flatten)]
    mark: Mark,
    #[serde(default)]
    refused_rows: Vec<RowError>,
}

struct Applying {
    seq: i32,
    last: BatchPayload,
    pending: Vec<Row>,
}

struct Written {
    refused: i64,
}

fn digest64(key: &str) -> u64 {
    let d = Sha256::digest(key.as_bytes());
    u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}

/// Reads a record by the header's rules.
fn read_row(header: &Header, record: Record) -> Row {
    let mut values = Vec::new();
    let mut problems = Vec::new();
    if record.cells.len() != header.slots.len() {
        problems.push(Problem {
            column: String::new(),
            code: "wrong_field_count",
            message: format!("{} cells; the header has {}", record.cells.len(), header.slots.len()),
        });
        return Row { record, values, problems };
    }
    // The key first, so `Row::key` finds it.
    let mut order: Vec<usize> = (0..header.slots.len()).collect();
    order.sort_by_key(|&i| header.slots[i].map(|r| r.kind != CellKind::OrderRef && r.name != "email").unwrap_or(true));
    for i in order {
        let Some(rule) = header.slots[i] else { continue };
        match read_cell(rule, &record.cells[i]) {
            Ok(v) => values.push((rule, v)),
            Err(p) => problems.push(p),
        }
    }
    // Problems in the file's column order.
    problems.sort_by_key(|p| header.slots.iter().position(|s| s.is_some_and(|r| r.name == p.column)).unwrap_or(0));
    Row { record, values, problems }
}

/// Parses `reader` as CSV on the calling (blocking) thread, sending the header and then chunks
/// of records; stops at the first whole-file error.
fn parse(reader: impl std::io::Read, tx: &tokio::sync::mpsc::Sender<Result<Read, Problem>>) {
    let tally = std::rc::Rc::new(std::cell::RefCell::new(Tally::default()));
    let reader = Tallied { inner: reader, tally: tally.clone() };
    let mut csv = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(reader);
    let mut record = csv::ByteRecord::new();
    let mut chunk = Vec::with_capacity(CHUNK);
    let mut number = 0i64;
    let mut first = true;
    loop {
        match csv.read_byte_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => {
                let code = if matches!(e.kind(), csv::ErrorKind::Io(_)) { "storage" } else { "invalid_csv" };
                let _ = tx.blocking_send(Err(Problem { column: String::new(), code, message: e.to_string() }));
                return;
            }
        }
        let inside = record.iter().map(|f| f.iter().filter(|b| **b == b'\n').count() as u64).sum::<u64>();
        let line = tally.borrow_mut().start_line(csv.position().byte(), inside);
        let mut cells = Vec::with_capacity(record.len());
        for field in record.iter() {
            match std::str::from_utf8(field) {
                Ok(text) => cells.push(text.to_owned()),
                Err(_) => {
                    let _ = tx.blocking_send(Err(Problem { column: String::new(), code: "not_utf8", message: format!("line {line} is not UTF-8") }));
                    return;
                }
            }
        }
        if first {
            first = false;
            if tx.blocking_send(Ok(Read::Header(cells))).is_err() {
                return;
            }
            continue;
        }
        number += 1;
        chunk.push(Record { number, line, cells });
        if chunk.len() == CHUNK && tx.blocking_send(Ok(Read::Records(std::mem::take(&mut chunk)))).is_err() {
            return;
        }
    }
    // In RFC 4180 every quote comes in a pair (an opening and a closing one, or `""` for a quote
    // in a quoted cell); the parser reads an unterminated quoted cell to the end of the file.
    if tally.borrow().quotes % 2 == 1 {
        let _ = tx.blocking_send(Err(Problem { column: String::new(), code: "unterminated_quote", message: "a quoted cell is not closed before the end of the file".into() }));
        return;
    }
    if !chunk.is_empty() {
        let _ = tx.blocking_send(Ok(Read::Records(chunk)));
    }
}

/// What the bytes read so far hold: their quotes, and where their line feeds are. A record's
/// line is worked out from where it ends (the parser's position after it is exact, where the
/// position it gives for its start is not after a CRLF or blank lines): the line feeds before
/// its end, less those inside its cells and its own terminating one.
#[derive(Default)]
struct Tally {
    /// Bytes read.
    read: u64,
    quotes: u64,
    /// Offsets of the line feeds read but not yet passed by a record's end.
    feeds: std::collections::VecDeque<u64>,
    /// Line feeds passed.
    passed: u64,
    /// The offset of the last line feed passed.
    last_feed: Option<u64>,
}

impl Tally {
    fn saw(&mut self, bytes: &[u8]) {
        for (i, b) in bytes.iter().enumerate() {
            match b {
                b'"' => self.quotes += 1,
                b'\n' => self.feeds.push_back(self.read + i as u64),
                _ => {}
            }
        }
        self.read += bytes.len() as u64;
    }

    /// The 1-based line a record starts on, given the offset just past its end and the line
    /// feeds inside its cells.
    fn start_line(&mut self, end: u64, inside: u64) -> i64 {
        while self.feeds.front().is_some_and(|&at| at < end) {
            self.last_feed = self.feeds.pop_front();
            self.passed += 1;
        }
        let terminated_by_feed = end > 0 && self.last_feed == Some(end - 1);
        (1 + self.passed - inside - terminated_by_feed as u64) as i64
    }
}

/// A reader that tallies what passes through it.
struct Tallied<R> {
    inner: R,
    tally: std::rc::Rc<std::cell::RefCell<Tally>>,
}

impl<R: std::io::Read> std::io::Read for Tallied<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.tally.borrow_mut().saw(&buf[..n]);
        Ok(n)
    }
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
async fn write_rows(txn: &DatabaseTransaction, dataset: Dataset, tenant_id: &str, rows: &[Row], mark: &mut Mark, refused: &mut Vec<RowError>) -> Result<Written, sea_orm::DbErr> {
    let mut written = Written { refused: 0 };
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
            run_ops::<customers::Entity>(txn, ops, mark, refused, &mut written).await?;
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
            run_ops::<orders::Entity>(txn, ops, mark, refused, &mut written).await?;
            if !touched.is_empty() {
                recompute_totals(txn, tenant_id, &touched).await?;
            }
        }
    }
    Ok(written)
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

/// Runs a batch's operations: all together under one savepoint, else one savepoint per row.
async fn run_ops<E>(txn: &DatabaseTransaction, ops: Vec<(&Row, Op<E::ActiveModel>)>, mark: &mut Mark, refused: &mut Vec<RowError>, written: &mut Written) -> Result<(), sea_orm::DbErr>
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
        if settle(nested, all).await.is_ok() {
            for (row, op) in &ops {
                let change = match op {
                    Op::Insert(_) => Change::Created,
                    Op::Update(_) => Change::Updated,
                    _ => Change::Unchanged,
                };
                count(Ok(change), row, mark, refused, written);
            }
            return Ok(());
        }
    }
    for (row, op) in ops {
        let outcome = match op {
            Op::Unchanged => Ok(Change::Unchanged),
            Op::Refuse(why) => Err(sea_orm::DbErr::Custom(why.to_owned())),
            Op::Insert(a) => {
                let nested = txn.begin().await?;
                let done = E::insert(a).exec_without_returning(&nested).await.map(|_| Change::Created);
                settle(nested, done).await
            }
            Op::Update(stmt) => {
                let nested = txn.begin().await?;
                let done = nested.execute_raw(stmt).await.map(|_| Change::Updated);
                settle(nested, done).await
            }
        };
        count(outcome, row, mark, refused, written);
    }
    Ok(())
}

fn count(outcome: Result<Change, sea_orm::DbErr>, row: &Row, mark: &mut Mark, refused: &mut Vec<RowError>, written: &mut Written) {
    match outcome {
        Ok(Change::Created) => mark.created += 1,
        Ok(Change::Updated) => mark.updated += 1,
        Ok(Change::Unchanged) => mark.unchanged += 1,
        Err(e) => {
            tracing::info!(line = row.record.line, error = %e, "a row the database refused");
            mark.refused += 1;
            written.refused += 1;
            refused.push(RowError { line: row.record.line, column: String::new(), code: "refused".into(), message: "the database refused this row".into() });
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
        // A column the file does not have is empty in a new record.
        None => Op::Insert(customers::ActiveModel {
            id: NotSet,
            tenant_id: Set(tenant_id.to_owned()),
            name: Set(text("name").unwrap_or_default()),
            email: Set(text("email").unwrap_or_default()),
            email_key: Set(key.to_owned()),
            phone: Set(text("phone").unwrap_or_default()),
            country: Set(text("country").unwrap_or_default()),
            created_at: Set(jiff::Timestamp::now().as_millisecond()),
            lifetime_total_cents: Set(0),
        }),
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
            let (Some(customer_id), Some(placed_at), Some(status), Some(total_cents)) = (customer, instant, text("status"), cents) else {
                return Op::Refuse("a new order needs customer_email, placed_at, status and total");
            };
            Op::Insert(orders::ActiveModel {
                id: NotSet,
                tenant_id: Set(tenant_id.to_owned()),
                customer_id: Set(customer_id),
                placed_at: Set(placed_at),
                country: Set(text("country").unwrap_or_default()),
                status: Set(status),
                total_cents: Set(total_cents),
                currency: Set(text("currency").unwrap_or_default()),
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

/// A report file written as it goes: `line, column, code, message`, then the record's cells,
/// defused; published content-addressed under `imports/`.
struct ReportWriter {
    upload: StagingUpload,
    buffer: Vec<u8>,
    hasher: Sha256,
    bytes: i64,
    rows: i64,
}

impl ReportWriter {
    fn start(store: &ExportStore, staging: &Path) -> std::io::Result<ReportWriter> {
        let mut w = ReportWriter { upload: store.stage(staging, Arc::new(|| {})), buffer: Vec::new(), hasher: Sha256::new(), bytes: 0, rows: 0 };
        w.record(&["line", "column", "code", "message"], &[])?;
        Ok(w)
    }

    fn record(&mut self, head: &[&str], cells: &[String]) -> std::io::Result<()> {
        let mut writer = csv::WriterBuilder::new().terminator(csv::Terminator::CRLF).flexible(true).from_writer(Vec::new());
        let fields: Vec<std::borrow::Cow<'_, str>> = head.iter().map(|h| defuse(h)).chain(cells.iter().map(|c| defuse(c))).collect();
        writer.write_record(fields.iter().map(|f| f.as_bytes()))?;
        let bytes = writer.into_inner().map_err(|e| std::io::Error::other(e.into_error()))?;
        self.hasher.update(&bytes);
        self.bytes += bytes.len() as i64;
        self.buffer.extend_from_slice(&bytes);
        Ok(())
    }

    async fn row(&mut self, line: i64, column: &str, code: &str, message: &str, cells: &[String]) -> Result<(), object_store::Error> {
        let line = line.to_string();
        self.record(&[&line, column, code, message], cells).map_err(|e| object_store::Error::Generic { store: "report", source: Box::new(e) })?;
        self.rows += 1;
        if self.buffer.len() >= 256 * 1024 {
            let chunk = std::mem::take(&mut self.buffer);
            self.upload.write(&chunk).await?;
        }
        Ok(())
    }

    async fn finish(mut self, store: &ExportStore, tenant_id: &str, job_id: &str, staging: &Path) -> Result<ReportFile, object_store::Error> {
        let rest = std::mem::take(&mut self.buffer);
        self.upload.write(&rest).await?;
        self.upload.finish().await?;
        let sha256 = hex::encode(self.hasher.finalize());
        let key = Path::from(format!("imports/{tenant_id}/{job_id}/{sha256}.csv"));
        store.publish(staging, &key, Arc::new(|| {})).await?;
        store.make_durable(&key).await?;
        Ok(ReportFile { key: key.to_string(), sha256, bytes: self.bytes, rows: self.rows })
    }
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

    #[test]
    fn records_carry_the_line_they_start_on_counting_line_breaks_inside_quotes() {
        let file = "email,name\r\na@x.test,\"two\nlines\"\nb@x.test,plain\r\n\n\r\nc@x.test,after blank lines\r\nd@x.test,\"cr\r\nlf\"";
        let (tx, mut rx) = tokio::sync::mpsc::channel(8);
        parse(file.as_bytes(), &tx);
        drop(tx);
        let mut lines = Vec::new();
        while let Ok(next) = rx.try_recv() {
            if let Ok(Read::Records(records)) = next {
                lines.extend(records.iter().map(|r| (r.number, r.line)));
            }
        }
        assert_eq!(lines, vec![(1, 2), (2, 4), (3, 7), (4, 8)]);
    }

    /// A file whose second record is one quoted cell of `feeds` line feeds, closed.
    struct QuotedFeeds {
        head: std::io::Cursor<Vec<u8>>,
        feeds: u64,
        tail: std::io::Cursor<Vec<u8>>,
    }

    impl QuotedFeeds {
        fn new(feeds: u64) -> QuotedFeeds {
            QuotedFeeds { head: std::io::Cursor::new(b"email,name\na@x.test,\"".to_vec()), feeds, tail: std::io::Cursor::new(b"\"\nb@x.test,after\n".to_vec()) }
        }
    }

    impl std::io::Read for QuotedFeeds {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.head.read(buf)?;
            if n > 0 {
                return Ok(n);
            }
            if self.feeds > 0 {
                let n = buf.len().min(self.feeds as usize);
                buf[..n].fill(b'\n');
                self.feeds -= n as u64;
                return Ok(n);
            }
            self.tail.read(buf)
        }
    }

    #[test]
    fn a_record_longer_than_any_valid_one_fails_the_file_while_it_is_read() {
        // 64 Mi line feeds inside quotes: the old reader held the whole record, and the line
        // feeds' offsets beside it, and then took it as a record.
        let (tx, mut rx) = tokio::sync::mpsc::channel(8);
        parse(QuotedFeeds::new(64 << 20), &tx);
        drop(tx);
        let mut failed = None;
        while let Ok(next) = rx.try_recv() {
            match next {
                Ok(Read::Records(records)) => assert!(records.iter().all(|r| r.cells.iter().map(String::len).sum::<usize>() < 1 << 20), "no record of that size is handed on"),
                Ok(Read::Header(_)) => {}
                Err(p) => failed = Some(p.code),
            }
        }
        assert_eq!(failed, Some("record_too_long"));
    }
}
