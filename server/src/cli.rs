//! The command line of SPEC §9. A flag wins over its variable; clap exits 2 on a usage error.

use clap::{Args, Parser, Subcommand};

/// exportd: idempotent CSV export service.
#[derive(Debug, Parser)]
#[command(name = "exportd", version, about)]
pub struct Cli {
    /// Options every command shares.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Where the data and the files live.
#[derive(Debug, Clone, Args)]
pub struct GlobalArgs {
    /// Database URL: sqlite://… (embedded default) or postgres://….
    #[arg(long, env = "DATABASE_URL", default_value = "sqlite://data/exportd.db", global = true)]
    pub database_url: String,
    /// Object store URL: file://folder or s3://bucket[/prefix].
    #[arg(long, env = "EXPORTD_STORE", default_value = "file://data/objects", global = true)]
    pub store: String,
}

/// Options of the processes that run jobs.
#[derive(Debug, Clone, Args)]
pub struct WorkerArgs {
    /// Comma-separated deployments this process serves (default: all).
    #[arg(long, env = "EXPORTD_DEPLOYMENTS", value_delimiter = ',')]
    pub deployments: Vec<String>,
    /// How many jobs run at once, 1–64 (each holds a database connection for its snapshot).
    #[arg(long, env = "EXPORTD_CONCURRENCY", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub concurrency: u16,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// UI + API, with an in-process worker unless --no-worker.
    Serve {
        /// Address to listen on.
        #[arg(long, env = "EXPORTD_BIND", default_value = "127.0.0.1:3000")]
        bind: String,
        /// Run no worker in this process.
        #[arg(long)]
        no_worker: bool,
        /// Worker options.
        #[command(flatten)]
        worker: WorkerArgs,
    },
    /// A worker process only.
    Worker {
        /// Worker options.
        #[command(flatten)]
        worker: WorkerArgs,
        /// Serve this process's `GET /metrics` (and nothing else) on this address.
        #[arg(long, env = "EXPORTD_METRICS_BIND")]
        metrics_bind: Option<String>,
    },
    /// Apply migrations.
    Migrate,
    /// Insert the demo data (idempotent).
    Seed {
        /// The demo tenants, users and orders of SPEC §2.
        #[arg(long, required = true)]
        demo: bool,
        /// Orders per tenant.
        #[arg(long, default_value_t = 10_000)]
        orders: u32,
    },
    /// Manage tenants.
    Tenant {
        /// What to do.
        #[command(subcommand)]
        command: TenantCommand,
    },
    /// Manage users.
    User {
        /// What to change.
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Manage API tokens.
    Token {
        /// What to do.
        #[command(subcommand)]
        command: TokenCommand,
    },
    /// Inspect and move operations, as an operator.
    Jobs {
        /// What to do.
        #[command(subcommand)]
        command: JobsCommand,
    },
    /// Pause the creation of new operations on every instance (503 creation-paused); status,
    /// cancel and downloads keep working and workers finish what is in flight.
    Drain {
        /// Resume creating operations.
        #[arg(long)]
        off: bool,
    },
    /// The keys download links are signed with.
    Keys {
        /// What to do.
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// The object store each deployment's files are bound to.
    Stores {
        /// What to do.
        #[command(subcommand)]
        command: StoresCommand,
    },
    /// Notifications of finished operations: webhooks and emails (docs/notifications.md).
    Notifications {
        /// What to do.
        #[command(subcommand)]
        command: NotificationsCommand,
    },
    /// The secret a tenant's webhooks are signed with.
    WebhookSecret {
        /// What to do.
        #[command(subcommand)]
        command: WebhookSecretCommand,
    },
    /// The catalog of reports and datasets (docs/catalog.md).
    Catalog {
        /// What to do.
        #[command(subcommand)]
        command: CatalogCommand,
    },
}

/// `exportd catalog …`.
#[derive(Debug, Subcommand)]
pub enum CatalogCommand {
    /// Checks a catalog file (default: EXPORTD_CATALOG, else the built-in demo catalog); exits 1
    /// with every error as FILE:LINE:COL: message.
    Check {
        /// The catalog file.
        file: Option<String>,
        /// Check everything but the SQL, without connecting to the source.
        #[arg(long)]
        offline: bool,
    },
    /// Creates in the source (EXPORTD_SOURCE_URL) the ledger table that imports into a source
    /// apart from the job store need, `exportd_import_batches`; one that is there is kept.
    MigrateSource,
}

/// A state an operator lists by: one of SPEC §4's (a usage error otherwise).
fn state(name: &str) -> Result<String, String> {
    match app::ExportStatus::parse(name) {
        Some(status) => Ok(status.as_str().to_owned()),
        None => Err(format!("one of {}", app::ExportStatus::ALL.map(|s| s.as_str()).join(", "))),
    }
}

/// `exportd jobs …`.
#[derive(Debug, Subcommand)]
pub enum JobsCommand {
    /// List operations, newest first.
    List {
        /// Only operations in this state.
        #[arg(long, value_parser = state)]
        state: Option<String>,
        /// Only operations of this tenant (its slug or id).
        #[arg(long)]
        tenant: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: u64,
    },
    /// An operation's record and its audit trail.
    Show {
        /// exp_….
        id: String,
    },
    /// Cancel an operation (queued or retry_wait: at once; running: at its next checkpoint).
    Cancel {
        /// exp_….
        id: String,
    },
    /// Queue a failed operation again, with its attempts reset, in its own deployment.
    Redrive {
        /// exp_….
        id: String,
    },
}

/// `exportd keys …`.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// A new key for new links on every instance (within seconds, no restart); links of the old
    /// one are refused once a link's lifetime has passed.
    Rotate,
}

/// `exportd stores …`.
#[derive(Debug, Subcommand)]
pub enum StoresCommand {
    /// Each deployment's recorded store identity beside the identity of the store configured
    /// for it here.
    List,
    /// Record the store configured here as the deployment's store from now on (a deliberate
    /// move; its files must have been copied there).
    Rebind {
        /// The deployment.
        deployment: String,
    },
}

/// `exportd user …`.
#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Change a user's role; takes effect at once.
    SetRole {
        /// The user's email.
        email: String,
        /// admin, analyst or viewer.
        role: String,
    },
    /// Add a user to a tenant; an email that exists is refused (exit 1) and nothing changes.
    Add {
        /// The user's email.
        email: String,
        /// The tenant's slug.
        #[arg(long)]
        tenant: String,
        /// admin, analyst or viewer.
        #[arg(long)]
        role: String,
        /// Read the password from the first line of standard input (without it, the user has
        /// no password).
        #[arg(long)]
        password_stdin: bool,
    },
    /// Deactivate a user: their sessions and tokens end at once.
    Deactivate {
        /// The user's email.
        email: String,
    },
    /// List users: email, tenant, role, active.
    List {
        /// Only this tenant's (its slug).
        #[arg(long)]
        tenant: Option<String>,
    },
}

/// `exportd notifications …`.
#[derive(Debug, Subcommand)]
pub enum NotificationsCommand {
    /// List notifications, newest first: id, operation, channel, status, attempts, type, target
    /// and the last attempt's outcome, tab-separated.
    List {
        /// Only this operation's.
        #[arg(long)]
        operation: Option<String>,
        /// Only those in this status: pending, delivered or failed.
        #[arg(long)]
        status: Option<String>,
        /// At most this many.
        #[arg(long, default_value_t = 50)]
        limit: u64,
    },
    /// Send a notification again from now (same id), retried for another 24 h.
    Redeliver {
        /// The notification's id (msg_…).
        id: String,
    },
}

/// `exportd webhook-secret …`.
#[derive(Debug, Subcommand)]
pub enum WebhookSecretCommand {
    /// Print the tenant's secret, making it if the tenant has none.
    Show {
        /// The tenant's slug or id.
        tenant: String,
    },
    /// Replace the tenant's secret and print the new one; the old one also signs for 24 h.
    Rotate {
        /// The tenant's slug or id.
        tenant: String,
    },
}

/// `exportd tenant …`.
#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Add a tenant; a slug or source id that exists is refused (exit 1) and nothing changes.
    Add {
        /// The tenant's slug.
        slug: String,
        /// The deployment whose workers and store serve it.
        #[arg(long)]
        deployment: String,
        /// What a catalog report's `tenant` expression is compared with (default: its id).
        #[arg(long)]
        source_id: Option<String>,
    },
    /// List tenants: slug, id, deployment, source id.
    List,
}

/// `exportd token …`.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print a new API token for a user, and nothing else.
    Create {
        /// The user's email.
        email: String,
    },
    /// List a user's tokens: id, created (epoch ms), active or revoked.
    List {
        /// The user's email.
        email: String,
    },
    /// Revoke a token at once.
    Revoke {
        /// The token's id (from `token list`).
        id: String,
    },
}
