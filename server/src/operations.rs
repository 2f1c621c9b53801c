//! The operator's switches (SPEC §9), kept in the database so that every instance obeys them
//! without a restart: `exportd drain` pauses the creation of new operations everywhere, while
//! status, cancel, downloads and replays keep working and workers finish what is in flight.

use crate::entities::settings;
use sea_orm::sea_query::OnConflict;
use sea_orm::{ConnectionTrait, DbErr, EntityTrait, Set};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The setting that holds the drain switch (`on` / `off`).
pub const DRAIN: &str = "drain";

/// The `Retry-After` of a create refused while draining.
pub const DRAIN_RETRY_AFTER_SECS: u64 = 30;

/// How long an instance trusts the switch it last read: `exportd drain` takes effect on every
/// instance within this time.
pub const DRAIN_READ_EVERY: Duration = Duration::from_secs(1);

/// One instance's view of the drain switch, read from the database at most every
/// [`DRAIN_READ_EVERY`].
#[derive(Debug, Default)]
pub struct Drain {
    last: Mutex<Option<(Instant, bool)>>,
}

impl Drain {
    /// Whether creation is paused now.
    pub async fn is_on<C: ConnectionTrait>(&self, db: &C) -> Result<bool, DbErr> {
        if let Ok(last) = self.last.lock() {
            if let Some((at, on)) = *last {
                if at.elapsed() < DRAIN_READ_EVERY {
                    return Ok(on);
                }
            }
        }
        let on = drain_is_on(db).await?;
        if let Ok(mut last) = self.last.lock() {
            *last = Some((Instant::now(), on));
        }
        Ok(on)
    }
}

/// Reads the drain switch from the database.
pub async fn drain_is_on<C: ConnectionTrait>(db: &C) -> Result<bool, DbErr> {
    Ok(settings::Entity::find_by_id(DRAIN.to_owned()).one(db).await?.is_some_and(|s| s.value == "on"))
}

/// Turns the drain switch on or off.
pub async fn set_drain<C: ConnectionTrait>(db: &C, on: bool, now_ms: i64) -> Result<(), DbErr> {
    settings::Entity::insert(settings::ActiveModel {
        name: Set(DRAIN.to_owned()),
        value: Set(if on { "on" } else { "off" }.to_owned()),
        updated_at: Set(now_ms),
    })
    .on_conflict(OnConflict::column(settings::Column::Name).update_columns([settings::Column::Value, settings::Column::UpdatedAt]).to_owned())
    .exec_without_returning(db)
    .await?;
    Ok(())
}

/// What an operator's command found, to print, or why it refused (exit 1).
pub type Answer = Result<String, String>;

fn database(e: DbErr) -> String {
    format!("database: {e}")
}

/// `exportd jobs list`: one line per operation, newest first.
pub async fn list_jobs<C: ConnectionTrait>(db: &C, state: Option<&str>, tenant: Option<&str>, limit: u64) -> Answer {
    use crate::entities::{jobs, tenants};
    use sea_orm::{ColumnTrait, Condition, QueryFilter, QueryOrder, QuerySelect};
    let mut find = jobs::Entity::find();
    if let Some(state) = state {
        find = find.filter(jobs::Column::Status.eq(state));
    }
    if let Some(tenant) = tenant {
        let found = tenants::Entity::find()
            .filter(Condition::any().add(tenants::Column::Slug.eq(tenant)).add(tenants::Column::Id.eq(tenant)))
            .one(db)
            .await
            .map_err(database)?
            .ok_or_else(|| format!("no tenant {tenant:?}"))?;
        find = find.filter(jobs::Column::TenantId.eq(found.id));
    }
    let rows = find.order_by_desc(jobs::Column::CreatedAt).order_by_desc(jobs::Column::Id).limit(limit).all(db).await.map_err(database)?;
    let mut out = String::new();
    for m in rows {
        out.push_str(&format!(
            "{}\t{}\t{}\t{}\t{}\tattempt {}\t{}\t{}\n",
            m.id,
            m.status,
            m.tenant_id,
            m.deployment,
            m.report,
            m.attempt,
            crate::clock::rfc3339(m.created_at),
            m.error_code.as_deref().unwrap_or("-")
        ));
    }
    Ok(out)
}

/// `exportd jobs show`: the record and its audit trail.
pub async fn show_job<C: ConnectionTrait>(db: &C, id: &str) -> Answer {
    use crate::clock::rfc3339;
    use crate::entities::{job_events, jobs};
    use sea_orm::{ColumnTrait, QueryFilter, QueryOrder};
    let m = jobs::Entity::find_by_id(id.to_owned()).one(db).await.map_err(database)?.ok_or_else(|| format!("no export {id:?}"))?;
    let opt = |v: Option<i64>| v.map_or_else(|| "-".to_owned(), rfc3339);
    let mut out = format!(
        "id: {}\nstatus: {}\ntenant: {}\nactor: {}\ndeployment: {}\nreport: {}\nkey: {}\nrequest: {}\nresolved: {}\n\
         generation: {}\nattempt: {}\nlease owner: {}\nlease expires: {}\nlast progress: {}\nnext attempt: {}\n\
         rows: {} of {}\nartifact: {} ({} bytes, sha256 {}, expires {}{})\nerror: {} {} {}\ncreated: {}\nupdated: {}\nfinished: {}\n\naudit trail:\n",
        m.id,
        m.status,
        m.tenant_id,
        m.actor_id,
        m.deployment,
        m.report,
        m.idempotency_key,
        m.request,
        m.resolved,
        m.generation,
        m.attempt,
        m.lease_owner.as_deref().unwrap_or("-"),
        opt(m.lease_expires_at),
        opt(m.last_progress_at),
        opt(m.next_attempt_at),
        m.rows_written,
        m.rows_total.map_or_else(|| "?".to_owned(), |n| n.to_string()),
        m.artifact_key.as_deref().unwrap_or("-"),
        m.artifact_bytes.unwrap_or(0),
        m.artifact_sha256.as_deref().unwrap_or("-"),
        opt(m.artifact_expires_at),
        if m.artifact_expired { ", expired" } else { "" },
        m.error_code.as_deref().unwrap_or("-"),
        m.error_message.as_deref().unwrap_or(""),
        m.error_support_ref.as_deref().unwrap_or(""),
        rfc3339(m.created_at),
        rfc3339(m.updated_at),
        opt(m.finished_at),
    );
    let events = job_events::Entity::find()
        .filter(job_events::Column::JobId.eq(id))
        .order_by_asc(job_events::Column::Id)
        .all(db)
        .await
        .map_err(database)?;
    for e in events {
        out.push_str(&format!(
            "{}\t{}\t{} -> {}\tgeneration {}\t{}\n",
            rfc3339(e.at),
            e.actor,
            e.from_status.as_deref().unwrap_or("-"),
            e.to_status,
            e.generation,
            e.detail.as_deref().unwrap_or("")
        ));
    }
    Ok(out)
}

/// `exportd jobs cancel`: as a user's cancel, of any operation.
pub async fn cancel_job(db: &sea_orm::DatabaseConnection, id: &str) -> Answer {
    use crate::job_store::transitions::{self, Canceller, Outcome};
    match transitions::cancel(db, id, Canceller::Operator).await.map_err(database)? {
        Outcome::Moved(row) => Ok(format!("{id}: {}\n", row.status)),
        Outcome::NotMoved(now) => match now.status {
            None => Err(format!("no export {id:?}")),
            Some(status) => Err(format!("{id} is {} and cannot be cancelled", status.as_str())),
        },
    }
}

/// `exportd jobs redrive`: a failed operation back to `queued`, in its own deployment. Refused,
/// with why, for an import whose file or report is no longer kept.
pub async fn redrive_job(db: &sea_orm::DatabaseConnection, id: &str) -> Answer {
    use crate::job_store::transitions::{self, Outcome};
    match transitions::redrive(db, id).await.map_err(database)? {
        Outcome::Moved(row) => Ok(format!("{id}: {} (deployment {})\n", row.status, row.deployment)),
        Outcome::NotMoved(now) => match now.status {
            None => Err(format!("no export {id:?}")),
            Some(app::ExportStatus::Failed) => Err(format!("{id} cannot go on: its uploaded file or its report is no longer kept; upload the file again and start a new import")),
            Some(status) => Err(format!("{id} is {}: only a failed export can be redriven", status.as_str())),
        },
    }
}

/// The deployments this database knows: its tenants', and those with a recorded store.
pub async fn known_deployments<C: ConnectionTrait>(db: &C) -> Result<Vec<String>, DbErr> {
    use crate::entities::tenants;
    use sea_orm::QuerySelect;
    let mut all: Vec<String> = tenants::Entity::find().select_only().column(tenants::Column::Deployment).distinct().into_tuple().all(db).await?;
    all.extend(crate::storage::identity::all_recorded(db).await?.into_iter().map(|(d, _)| d));
    for d in &mut all {
        d.make_ascii_lowercase();
    }
    all.sort();
    all.dedup();
    Ok(all)
}

/// At the start of `serve` or `worker`: every deployment in `deployments` must have its files'
/// store configured here (SPEC §5.13); a deployment without a recorded store records the one
/// configured here. A store that does not answer now is checked again at its first use.
pub async fn check_stores(db: &sea_orm::DatabaseConnection, stores: &crate::storage::Stores, deployments: &[String]) -> Result<(), String> {
    for deployment in deployments {
        match stores.for_deployment(db, deployment).await {
            Ok(_) => {}
            Err(crate::storage::StoreError::Binding(e)) if e.is_elsewhere() => return Err(e.to_string()),
            Err(e) => tracing::warn!(deployment = %deployment, error = %e, "cannot check this deployment's store now; it is checked again at its first use"),
        }
    }
    Ok(())
}

/// `exportd stores list`.
pub async fn list_stores(db: &sea_orm::DatabaseConnection, stores: &crate::storage::Stores) -> Answer {
    let recorded: std::collections::BTreeMap<String, String> = crate::storage::identity::all_recorded(db).await.map_err(database)?.into_iter().collect();
    let mut out = String::new();
    for deployment in known_deployments(db).await.map_err(database)? {
        let here = match stores.configured_for(&deployment) {
            Ok(store) => match crate::storage::identity::read_marker(&store).await {
                Ok(Some(identity)) => identity,
                Ok(None) => "(no identity yet)".to_owned(),
                Err(e) => format!("(does not answer: {e})"),
            },
            Err(e) => format!("(cannot open: {e})"),
        };
        let bound = recorded.get(&deployment).map_or("(none yet)", String::as_str);
        let verdict = if recorded.get(&deployment) == Some(&here) { "ok" } else { "differs" };
        out.push_str(&format!("{deployment}\trecorded {bound}\tconfigured here {here}\t{verdict}\n"));
    }
    Ok(out)
}

/// `exportd stores rebind`: the store configured here becomes the deployment's.
pub async fn rebind_store(db: &sea_orm::DatabaseConnection, stores: &crate::storage::Stores, deployment: &str, now_ms: i64) -> Answer {
    let deployment = deployment.trim().to_ascii_lowercase();
    let store = stores.configured_for(&deployment)?;
    let identity = crate::storage::identity::rebind(db, &deployment, &store, now_ms).await.map_err(|e| e.to_string())?;
    Ok(format!("{deployment}: bound to the store with identity {identity}\n"))
}
