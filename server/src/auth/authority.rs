//! Where a user's role comes from at every check of "authorised" (contract §2, §13): the role
//! stored with the user, or, when the catalog declares `[authority] sql`, the answer of that
//! query on the source, asked afresh at each check. Everything that needs a role asks
//! [`Authority`]; nothing else knows which it is.

use super::Role;
use crate::catalog::placeholders;
use crate::job_store::authority::Permission;
use sea_orm::sea_query::Expr;
use sea_orm::{ConnectOptions, ConnectionTrait, Database, DatabaseConnection};
use std::sync::Arc;
use std::time::Duration;

/// The source gave no answer in time (unreachable, too slow, or its query failed): requests
/// answer 503 `busy`, a worker's attempt ends retryable, and nothing is released on it.
#[derive(Debug, thiserror::Error)]
#[error("the authority source did not answer: {0}")]
pub struct Unanswered(pub String);

/// Why a job's actor's role could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RoleError {
    /// The job store failed.
    #[error("database: {0}")]
    Db(#[from] sea_orm::DbErr),
    /// The authority's source did not answer.
    #[error(transparent)]
    Unanswered(#[from] Unanswered),
}

/// Who a role is asked for: the user's stored role, its subject (the OIDC `sub`, or a password
/// user's email) and its tenant's source id.
#[derive(Debug, Clone, Copy)]
pub struct Whom<'a> {
    /// The role stored with the user.
    pub stored: Role,
    /// `:subject`.
    pub subject: &'a str,
    /// `:tenant`.
    pub tenant_source_id: &'a str,
}

impl<'a> Whom<'a> {
    /// A user of `email` (and of `oidc_subject` when the provider signs it in) in the tenant of
    /// `tenant_source_id`: its subject is the provider's `sub`, or a password user's email
    /// (contract §13).
    pub fn of(stored: Role, email: &'a str, oidc_subject: Option<&'a str>, tenant_source_id: &'a str) -> Whom<'a> {
        Whom { stored, subject: oidc_subject.unwrap_or(email), tenant_source_id }
    }
}

/// The one place a role is read from.
#[derive(Clone)]
pub enum Authority {
    /// The role stored with the user: the claim of its last sign-in, or one pinned by
    /// `exportd user set-role`.
    Stored,
    /// The catalog's `[authority] sql` on the source.
    Source(Arc<SourceAuthority>),
}

/// The catalog's `[authority] sql`, with the pool it runs on and its bound.
pub struct SourceAuthority {
    db: DatabaseConnection,
    sql: String,
    timeout: Duration,
}

/// How long one authority query may take, acquiring its connection included
/// (`EXPORTD_AUTHORITY_TIMEOUT_MS`, default 2,000).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(2);

impl Authority {
    /// The catalog's authority when it declares one (on `source_url`, with a small pool that
    /// connects when first used, so a source that is down at start is a refusal later, not a
    /// failed start), else the stored role.
    pub async fn from_catalog(sql: Option<&str>, source_url: &str, timeout: Duration) -> Result<Authority, sea_orm::DbErr> {
        let Some(sql) = sql else { return Ok(Authority::Stored) };
        let mut options = ConnectOptions::new(source_url.to_owned());
        let ms = format!("{}", timeout.as_millis());
        options
            .max_connections(4)
            .min_connections(0)
            .connect_lazy(true)
            .acquire_timeout(timeout)
            .sqlx_logging(false)
            // The server gives up too, so a query stuck behind a lock does not outlive its answer.
            .map_sqlx_postgres_opts(move |o| o.application_name("exportd-authority").options([("statement_timeout", ms.clone()), ("lock_timeout", ms.clone())]));
        let db = Database::connect(options).await?;
        Ok(Authority::Source(Arc::new(SourceAuthority { db, sql: sql.to_owned(), timeout })))
    }

    /// The role `whom` has now; `None` is no access (the source returned no row, or a value
    /// that is not a role). With the stored role, always that role.
    pub async fn role(&self, whom: Whom<'_>) -> Result<Option<Role>, Unanswered> {
        match self {
            Authority::Stored => Ok(Some(whom.stored)),
            Authority::Source(source) => source.role(whom).await,
        }
    }

    /// The role the user `user_id` has now in the tenant `tenant_id`, as a worker checks it:
    /// `None` when the user is unknown, inactive or of another tenant; no access reads as a
    /// viewer's. A schedule's service identity has the lesser of its schedule's role and its
    /// owner's role now (`None` when the owner is inactive).
    pub async fn current_role<C: ConnectionTrait>(&self, db: &C, user_id: &str, tenant_id: &str) -> Result<Option<Role>, RoleError> {
        let Some((role, schedule)) = self.person_role(db, user_id, tenant_id).await? else { return Ok(None) };
        let Some(schedule) = schedule else { return Ok(Some(role)) };
        let owner: Option<String> = {
            use crate::entities::schedules;
            use sea_orm::{EntityTrait, QuerySelect};
            schedules::Entity::find_by_id(schedule).select_only().column(schedules::Column::OwnerId).into_tuple().one(db).await?
        };
        let Some(owner) = owner else { return Ok(None) };
        Ok(self.person_role(db, &owner, tenant_id).await?.map(|(owner_role, _)| owner_role.lesser(role)))
    }

    /// A user's role now, and their schedule when they are a schedule's service identity (whose
    /// stored role is the schedule's).
    async fn person_role<C: ConnectionTrait>(&self, db: &C, user_id: &str, tenant_id: &str) -> Result<Option<(Role, Option<String>)>, RoleError> {
        use crate::entities::{tenants, users};
        use sea_orm::sea_query::{Expr, ExprTrait, Query};
        let query = Query::select()
            .columns([(users::Entity, users::Column::Role), (users::Entity, users::Column::Email), (users::Entity, users::Column::OidcSubject)])
            .column((tenants::Entity, tenants::Column::SourceId))
            .column((users::Entity, users::Column::ScheduleId))
            .from(users::Entity)
            .inner_join(tenants::Entity, Expr::col((tenants::Entity, tenants::Column::Id)).equals((users::Entity, users::Column::TenantId)))
            .and_where(Expr::col((users::Entity, users::Column::Id)).eq(user_id))
            .and_where(Expr::col((users::Entity, users::Column::TenantId)).eq(tenant_id))
            .and_where(Expr::col((users::Entity, users::Column::Active)).eq(true))
            .to_owned();
        let Some(row) = db.query_one_raw(db.get_database_backend().build(&query)).await? else { return Ok(None) };
        let Some(stored) = Role::parse(&row.try_get_by_index::<String>(0)?) else { return Ok(None) };
        let schedule = row.try_get_by_index::<Option<String>>(4)?;
        if schedule.is_some() {
            // The authority's source does not know a service identity: its role is its schedule's.
            return Ok(Some((stored, schedule)));
        }
        let email = row.try_get_by_index::<String>(1)?;
        let subject = row.try_get_by_index::<Option<String>>(2)?;
        let source_id = row.try_get_by_index::<String>(3)?;
        let whom = Whom::of(stored, &email, subject.as_deref(), &source_id);
        Ok(Some((self.role(whom).await?.unwrap_or(Role::Viewer), None)))
    }

    /// The condition a worker's fenced writes carry: the job's actor exists, is active and is of
    /// the job's tenant, and, when the role is stored in the job store, has a role that
    /// `permission` allows. With a source's authority the role cannot be part of the job
    /// store's UPDATE: the worker asks the source just before (see docs/authentication.md for
    /// the window this leaves).
    pub fn condition(&self, permission: Permission) -> Expr {
        permission.condition(matches!(self, Authority::Stored))
    }

    /// Whether the role comes from the catalog's `[authority] sql`.
    pub fn is_source(&self) -> bool {
        matches!(self, Authority::Source(_))
    }
}

impl SourceAuthority {
    async fn role(&self, whom: Whom<'_>) -> Result<Option<Role>, Unanswered> {
        let backend = self.db.get_database_backend();
        let statement = placeholders::statement(&self.sql, backend, |name| match name {
            "tenant" => Some(whom.tenant_source_id.to_owned()),
            "subject" => Some(whom.subject.to_owned()),
            _ => None,
        })
        .map_err(Unanswered)?;
        let row = tokio::time::timeout(self.timeout, self.db.query_one_raw(statement))
            .await
            .map_err(|_| Unanswered(format!("no answer within {} ms", self.timeout.as_millis())))?
            .map_err(|e| Unanswered(e.to_string()))?;
        let Some(row) = row else { return Ok(None) };
        // Any value that is not a role's name (NULL, a number, an unknown name) is no access.
        Ok(row.try_get_by_index::<Option<String>>(0).ok().flatten().as_deref().map(str::trim).and_then(Role::parse))
    }
}
