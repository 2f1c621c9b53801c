//! The report of an import (SPEC §10): one row per (record, problem) in input order, the
//! record's cells after them (defused), and for an import that ended failed or cancelled a
//! `not_applied` row for each valid record after the last committed batch. One function writes
//! it for every ending, from what is durable: the upload, the plan and its validation report,
//! the last batch's counts and the rows the database refused. A ready import's worker writes it
//! before the release; any other ending gets it afterwards ([`settle`]), from the worker that
//! ended the attempt or, for an ending no worker saw (the janitor's, a cancel while waiting, a
//! lost process), from the janitor of a worker that serves the deployment. Memory is bounded:
//! the file, the validation report and the refusals are each read in order, a chunk at a time.

use super::attempt::Stop;
use super::import_file::{self, Entries, Next};
use crate::entities::{import_refusals, jobs};
use crate::imports::stored::{self, plan_of, request_of, resolved_of, ReportFile};
use crate::job_store::transitions::{self, Artifact, Failure};
use crate::job_store::Mover;
use crate::storage::{staging_part_key, ExportStore, StagingUpload};
use crate::csv_cells::defuse;
use crate::worker::WorkerContext;
use object_store::path::Path;
use sea_orm::{DatabaseConnection, EntityTrait};
use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::sync::Arc;

/// The staging objects of an attempt: the validation's report, and the final one.
pub(super) const VALIDATION_REPORT: i32 = 1;
const FINAL_REPORT: i32 = 2;

/// Refusals read from the database at a time.
const REFUSALS_PAGE: u64 = 1000;

/// How the import ended, for its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    /// It is about to be released: every valid row was applied (or, in a dry run, tried).
    Released,
    /// It ended failed or cancelled: the valid rows after the last committed batch were not.
    Stopped,
}

/// Writes the report of `job` as it stands, for `ending`, and publishes it.
pub(super) async fn write(ctx: &WorkerContext, store: &ExportStore, job: &jobs::Model, ending: Ending) -> Result<ReportFile, Stop> {
    let request = request_of(job).map_err(Stop::internal)?;
    let dataset = ctx.config.catalog.dataset(&request.dataset).cloned().map(std::sync::Arc::new).ok_or_else(|| Stop::internal(format!("the dataset {:?} is not in this worker's catalog", request.dataset)))?;
    // The plan as stored now: an attempt's own copy of the job predates the plan it fixed.
    let stored = jobs::Entity::find_by_id(job.id.clone()).one(&ctx.db).await.map_err(Stop::internal)?;
    let plan = plan_of(stored.as_ref().unwrap_or(job)).map_err(Stop::internal)?;
    let staging = staging_part_key(&job.id, job.generation, FINAL_REPORT);
    let resolved = resolved_of(job).map_err(Stop::internal)?;
    // A workbook's report names each record's sheet.
    let sheets = import_file::is_workbook(store, &resolved.object_key).await?;
    let mut report = ReportWriter::start(store, &staging, sheets).map_err(Stop::internal)?;
    if let Some(plan) = plan.as_ref().filter(|p| p.fails.as_deref() == Some(Failure::INVALID_FILE.code)) {
        for e in &plan.first_errors {
            report.row(e.line, e.sheet.as_deref(), &e.column, &e.code, &e.message, &[]).await.map_err(Stop::storage)?;
        }
        return report.finish(store, &job.tenant_id, &job.id, &staging).await.map_err(Stop::storage);
    }
    let applied_through = match ending {
        Ending::Released => None,
        Ending::Stopped => {
            let mark = stored::last_mark(&ctx.db, &job.id).await.map_err(Stop::internal)?;
            let mark = match &ctx.source {
                Some(source) => {
                    let (through, refused) = super::import_writes::ledger_through(source, &job.id, mark).await.map_err(Stop::internal)?;
                    // The rows refused in batches only the ledger holds are named too.
                    stored::record_refusals(&ctx.db, &job.id, job.checkpoint_seq + 1, &refused).await.map_err(Stop::internal)?;
                    through
                }
                None => mark,
            };
            Some(mark.last_record)
        }
    };
    // The validation's report lists only invalid records: with none, it is not read.
    let validation = plan.as_ref().filter(|p| p.invalid > 0).and_then(|p| p.report.as_ref());
    let mut refusals = Refusals { db: &ctx.db, job_id: &job.id, after: 0, buffered: VecDeque::new(), done: false };
    // A released import with nothing to report has a report of its header alone: the file is
    // not read again.
    if applied_through.is_none() && validation.is_none() && refusals.is_empty().await? {
        return report.finish(store, &job.tenant_id, &job.id, &staging).await.map_err(Stop::storage);
    }
    let mut validation = validation.map(|file| Entries::open(store, &file.key)).unwrap_or_else(Entries::none);
    let mut rows = import_file::rows(store, &resolved.object_key, &import_file::Reading::of(ctx, &dataset));
    loop {
        let chunk = match rows.next().await {
            Ok(Next::Rows(chunk)) => chunk,
            Ok(Next::End) => break,
            Ok(Next::Invalid(p)) => {
                report.row(1, None, &p.column, &p.code, &p.message, &[]).await.map_err(Stop::storage)?;
                break;
            }
            Err(Stop::Failed { failure, .. }) if failure == Failure::UPLOAD_EXPIRED => {
                let through = applied_through.unwrap_or(0);
                let message = format!("the uploaded file is no longer kept, so its rows cannot be listed: no record after record {through} was applied");
                report.row(1, None, "", Failure::UPLOAD_EXPIRED.code, &message, &[]).await.map_err(Stop::storage)?;
                break;
            }
            Err(other) => return Err(other),
        };
        for row in chunk {
            let (line, sheet) = (row.record.line, row.record.sheet_name());
            let mut listed = false;
            for e in validation.take(row.record.position()).await? {
                report.row(line, sheet, &e.column, &e.code, &e.message, &row.record.cells).await.map_err(Stop::storage)?;
                listed = true;
            }
            for r in refusals.take(row.record.number).await? {
                report.row(line, sheet, "", "refused", &r.message, &row.record.cells).await.map_err(Stop::storage)?;
                listed = true;
            }
            if applied_through.is_some_and(|through| !listed && row.record.number > through) {
                report.row(line, sheet, "", "not_applied", "this row was not applied", &row.record.cells).await.map_err(Stop::storage)?;
            }
        }
    }
    report.finish(store, &job.tenant_id, &job.id, &staging).await.map_err(Stop::storage)
}

/// Writes and records the report that `job_id` is owed, if it ended failed or cancelled
/// without one; `true` when this call recorded it. Safe to run anywhere at once: the report is
/// the same bytes whoever writes it, and only the first is recorded (a later copy is an object
/// no job keeps, which the sweep removes).
pub(super) async fn settle(ctx: &WorkerContext, store: &ExportStore, job_id: &str, by: Mover<'_>) -> Result<bool, Stop> {
    let Some(job) = jobs::Entity::find_by_id(job_id.to_owned()).one(&ctx.db).await.map_err(Stop::internal)? else { return Ok(false) };
    if !stored::owes_report(&job) {
        return Ok(false);
    }
    let report = write(ctx, store, &job, Ending::Stopped).await?;
    let artifact = Artifact { key: report.key, sha256: report.sha256, bytes: report.bytes, rows: report.rows, bundle_digest: None };
    let recorded = transitions::attach_report(&ctx.db, &job, &artifact, ctx.config.artifact_ttl, by).await.map_err(Stop::internal)?;
    forget_staging(store, &job).await;
    if recorded {
        ctx.metrics.import_reports_settled.inc();
        tracing::info!(job = %job.id, status = %job.status, "the report of an import that did not finish is written");
    }
    Ok(recorded)
}

/// Records the report of `job`, whose attempt is about to end it failed or cancelled, while
/// the attempt still holds it: the ending is then never seen without its report. A failure is
/// logged; [`settle`] after the ending tries again.
pub(super) async fn attach_before_ending(ctx: &WorkerContext, store: &ExportStore, job: &jobs::Model) {
    let written = match write(ctx, store, job, Ending::Stopped).await {
        Ok(report) => report,
        Err(e) => {
            tracing::warn!(job = %job.id, error = ?e, "the report of an import that did not finish was not written before its ending");
            return;
        }
    };
    let artifact = Artifact { key: written.key, sha256: written.sha256, bytes: written.bytes, rows: written.rows, bundle_digest: None };
    if let Err(e) = transitions::attach_artifact(&ctx.db, job, &artifact, ctx.config.artifact_ttl).await {
        tracing::warn!(job = %job.id, error = %e, "the report of an import that did not finish was not recorded before its ending");
    }
}

/// [`settle`] after the worker's own ending: a failure is logged, and left to the janitor.
pub(super) async fn settle_logged(ctx: &WorkerContext, store: &ExportStore, job_id: &str) {
    if let Err(e) = settle(ctx, store, job_id, Mover::Worker(&ctx.worker_id)).await {
        tracing::warn!(job = %job_id, error = ?e, "the report of an import that did not finish was not written; the janitor will");
    }
}

/// Reports owed to imports of the deployments this worker serves, written one at a time; how
/// many were recorded.
pub async fn settle_owed(ctx: &WorkerContext, limit: u64) -> Result<usize, sea_orm::DbErr> {
    let mut recorded = 0;
    for job in transitions::owed_reports(&ctx.db, &ctx.worker.deployments, limit).await? {
        let store = match ctx.stores.for_deployment(&ctx.db, &job.deployment).await {
            Ok(store) => store,
            Err(e) => {
                tracing::warn!(job = %job.id, error = %e, "no store for the deployment of an import owed a report");
                continue;
            }
        };
        match settle(ctx, &store, &job.id, Mover::Janitor(&ctx.worker_id)).await {
            Ok(done) => recorded += done as usize,
            Err(e) => tracing::warn!(job = %job.id, error = ?e, "the report of an import that did not finish was not written; next pass"),
        }
    }
    Ok(recorded)
}

/// Deletes the staging objects of `job`'s attempt (written, or left by a failure).
pub(super) async fn forget_staging(store: &ExportStore, job: &jobs::Model) {
    for part in [VALIDATION_REPORT, FINAL_REPORT] {
        let _ = store.delete(&staging_part_key(&job.id, job.generation, part)).await;
    }
}

/// The rows an import's batches refused, in record order, a page at a time.
struct Refusals<'a> {
    db: &'a DatabaseConnection,
    job_id: &'a str,
    /// The last record read.
    after: i64,
    buffered: VecDeque<import_refusals::Model>,
    done: bool,
}

impl Refusals<'_> {
    async fn fill(&mut self) -> Result<(), Stop> {
        let page = stored::refusals_after(self.db, self.job_id, self.after, REFUSALS_PAGE).await.map_err(Stop::internal)?;
        self.done = (page.len() as u64) < REFUSALS_PAGE;
        if let Some(last) = page.last() {
            self.after = last.record;
        }
        self.buffered.extend(page);
        Ok(())
    }

    async fn is_empty(&mut self) -> Result<bool, Stop> {
        if self.buffered.is_empty() && !self.done {
            self.fill().await?;
        }
        Ok(self.buffered.is_empty())
    }

    /// The refusals of record `number`, passing over any before it: records are asked for in
    /// order.
    async fn take(&mut self, number: i64) -> Result<Vec<import_refusals::Model>, Stop> {
        let mut found = Vec::new();
        loop {
            while let Some(front) = self.buffered.front() {
                if front.record > number {
                    return Ok(found);
                }
                if let Some(r) = self.buffered.pop_front().filter(|r| r.record == number) {
                    found.push(r);
                }
            }
            if self.done {
                return Ok(found);
            }
            self.fill().await?;
        }
    }
}

/// A report file written as it goes: `line, column, code, message` (and for a workbook `sheet`),
/// then the record's cells, defused; published content-addressed under `imports/`.
pub(super) struct ReportWriter {
    upload: StagingUpload,
    /// Whether it has the `sheet` column.
    sheets: bool,
    buffer: Vec<u8>,
    hasher: Sha256,
    bytes: i64,
    rows: i64,
}

impl ReportWriter {
    /// A report staged at `staging`, its header written (with `sheets`, a `sheet` column after
    /// `message`, so the first four columns are every report's).
    pub(super) fn start(store: &ExportStore, staging: &Path, sheets: bool) -> std::io::Result<ReportWriter> {
        let mut w = ReportWriter { upload: store.stage(staging, Arc::new(|| {})), sheets, buffer: Vec::new(), hasher: Sha256::new(), bytes: 0, rows: 0 };
        let head: &[&str] = if sheets { &["line", "column", "code", "message", "sheet"] } else { &["line", "column", "code", "message"] };
        w.record(head, &[])?;
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

    /// One entry: a record's line (and sheet), a problem, and the record's cells.
    pub(super) async fn row(&mut self, line: i64, sheet: Option<&str>, column: &str, code: &str, message: &str, cells: &[String]) -> Result<(), object_store::Error> {
        let line = line.to_string();
        let written = match self.sheets {
            true => self.record(&[&line, column, code, message, sheet.unwrap_or("")], cells),
            false => self.record(&[&line, column, code, message], cells),
        };
        written.map_err(|e| object_store::Error::Generic { store: "report", source: Box::new(e) })?;
        self.rows += 1;
        if self.buffer.len() >= 256 * 1024 {
            let chunk = std::mem::take(&mut self.buffer);
            self.upload.write(&chunk).await?;
        }
        Ok(())
    }

    /// Publishes the report content-addressed under `imports/{tenant}/{job}/`.
    pub(super) async fn finish(mut self, store: &ExportStore, tenant_id: &str, job_id: &str, staging: &Path) -> Result<ReportFile, object_store::Error> {
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

