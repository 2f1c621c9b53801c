//! `exportd seed --demo` (SPEC §2): two tenants, four users and a synthetic dataset with the
//! awkward cases a CSV export must survive. Re-running changes nothing that exists.

use crate::auth::hash_password;
use crate::entities::{customers, orders, tenants, users};
use sea_orm::{ActiveModelTrait, ColumnTrait, DatabaseConnection, DbErr, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect, Set, TransactionTrait};
use sea_orm::ActiveValue::NotSet;

/// The demo password of every demo user.
pub const DEMO_PASSWORD: &str = "export-demo";

const TENANTS: [(&str, &str, &str); 2] = [("acme", "Acme Trading", "ksa"), ("globex", "Globex", "uae")];
const USERS: [(&str, &str, &str); 4] = [
    ("alice@acme.test", "acme", "admin"),
    ("bob@acme.test", "acme", "analyst"),
    ("vic@acme.test", "acme", "viewer"),
    ("gina@globex.test", "globex", "admin"),
];

const FIRST: [&str; 12] = ["Alice", "Omar", "Fatimah", "John", "محمد", "فاطمة", "Zoë", "Nasser", "عبدالله", "Mary-Jane", "O'Brien", "لينا"];
const LAST: [&str; 10] = ["Smith", "Al-Harbi", "العتيبي", "Nguyen", "القحطاني", "García", "Doe, Jr.", "الشمري", "Müller", "\"The Boss\""];
const COUNTRIES: [&str; 6] = ["SA", "AE", "US", "GB", "EG", "DE"];
const STATUSES: [&str; 4] = ["paid", "pending", "refunded", "cancelled"];
const NOTES: [&str; 9] = [
    "",
    "Leave at the door",
    "=HYPERLINK(\"http://example.test\",\"click\")",
    "+966 phone order",
    "-discount applied",
    "@mention the courier",
    "Line one\nLine two, with a comma",
    "He said \"fragile\"",
    "يرجى الاتصال قبل التوصيل",
];

/// A small deterministic generator, so the demo data is the same on every machine.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }

    /// A number below `bound`, from two draws (one draw has only 31 bits).
    fn below(&mut self, bound: u64) -> u64 {
        ((self.next() << 31) | self.next()) % bound
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[(self.next() as usize) % items.len()]
    }
}

/// Inserts the demo data where absent. `orders` is the number of orders per tenant.
pub async fn seed_demo(db: &DatabaseConnection, orders_per_tenant: u32, now_ms: i64) -> Result<(), DbErr> {
    for (slug, name, deployment) in TENANTS {
        if tenants::Entity::find().filter(tenants::Column::Slug.eq(slug)).one(db).await?.is_none() {
            tenants::ActiveModel {
                id: Set(format!("ten_{slug}")),
                source_id: Set(format!("ten_{slug}")),
                slug: Set(slug.to_owned()),
                name: Set(name.to_owned()),
                deployment: Set(deployment.to_owned()),
                created_at: Set(now_ms),
                last_claimed_at: Set(0),
            }
            .insert(db)
            .await?;
        }
        crate::notifications::secrets::ensure(db, &format!("ten_{slug}"), now_ms).await?;
    }
    for (email, slug, role) in USERS {
        if users::Entity::find().filter(users::Column::Email.eq(email)).one(db).await?.is_none() {
            let hash = hash_password(DEMO_PASSWORD).map_err(|e| DbErr::Custom(format!("hashing: {e}")))?;
            users::ActiveModel {
                id: Set(format!("usr_{}", email.split('@').next().unwrap_or(email))),
                tenant_id: Set(format!("ten_{slug}")),
                email: Set(email.to_owned()),
                password_hash: Set(hash),
                role: Set(role.to_owned()),
                active: Set(true),
                created_at: Set(now_ms),
                oidc_issuer: Set(None),
                oidc_subject: Set(None),
                contact_email: Set(None),
                role_pinned: Set(false),
                schedule_id: Set(None),
            }
            .insert(db)
            .await?;
        }
    }
    for (i, (slug, _, _)) in TENANTS.iter().enumerate() {
        let tenant_id = format!("ten_{slug}");
        if orders::Entity::find().filter(orders::Column::TenantId.eq(&tenant_id)).count(db).await? > 0 {
            continue;
        }
        seed_orders(db, &tenant_id, orders_per_tenant, now_ms, 0x5eed + i as u64).await?;
    }
    Ok(())
}

/// Rows per INSERT.
const BATCH: usize = 1000;

/// One generated order, before its customer has an id.
struct DraftOrder {
    customer: usize,
    status: &'static str,
    total: i64,
    placed_at: i64,
    country: &'static str,
    notes: &'static str,
}

fn draft_order(rng: &mut Lcg, n_customers: usize, now_ms: i64) -> DraftOrder {
    const TWO_YEARS_MS: u64 = 730 * 24 * 3600 * 1000;
    let customer = (rng.next() as usize) % n_customers;
    let status = rng.pick(&STATUSES);
    let mut total = (rng.next() % 200_000) as i64 + 100;
    if status == "refunded" {
        total = -total;
    }
    DraftOrder { customer, status, total, placed_at: now_ms - rng.below(TWO_YEARS_MS) as i64, country: rng.pick(&COUNTRIES), notes: rng.pick(&NOTES) }
}

async fn seed_orders(db: &DatabaseConnection, tenant_id: &str, n: u32, now_ms: i64, seed: u64) -> Result<(), DbErr> {
    const TWO_YEARS_MS: u64 = 730 * 24 * 3600 * 1000;
    let mut rng = Lcg(seed);
    let n_customers = (n / 10).max(1) as usize;
    let mut customers = Vec::with_capacity(n_customers);
    for c in 0..n_customers {
        let first = rng.pick(&FIRST);
        let last = rng.pick(&LAST);
        let email = format!("customer{c}@{}.example", tenant_id.trim_start_matches("ten_"));
        customers.push(customers::ActiveModel {
            id: NotSet,
            tenant_id: Set(tenant_id.to_owned()),
            name: Set(format!("{first} {last}")),
            email_key: Set(migrations::email_key(&email)),
            email: Set(email),
            phone: Set(format!("+9665{:08}", rng.next() % 100_000_000)),
            country: Set(rng.pick(&COUNTRIES).to_owned()),
            created_at: Set(now_ms - rng.below(TWO_YEARS_MS) as i64),
            lifetime_total_cents: Set(0),
        });
    }
    // The orders are drawn twice from the same state: once for the customers' lifetime totals
    // (so customers are inserted complete), once to insert them with their customers' ids.
    let orders_from = Lcg(rng.0);
    let mut totals = vec![0i64; n_customers];
    for _ in 0..n {
        let order = draft_order(&mut rng, n_customers, now_ms);
        totals[order.customer] += order.total;
    }
    for (customer, total) in customers.iter_mut().zip(&totals) {
        customer.lifetime_total_cents = Set(*total);
    }
    let txn = db.begin().await?;
    let mut rows = customers.into_iter().peekable();
    while rows.peek().is_some() {
        let batch: Vec<_> = rows.by_ref().take(BATCH).collect();
        customers::Entity::insert_many(batch).exec_without_returning(&txn).await?;
    }
    let ids: Vec<i64> = customers::Entity::find()
        .select_only()
        .column(customers::Column::Id)
        .filter(customers::Column::TenantId.eq(tenant_id))
        .order_by_asc(customers::Column::Id)
        .into_tuple()
        .all(&txn)
        .await?;
    let mut rng = orders_from;
    let currency = if tenant_id.ends_with("acme") { "SAR" } else { "AED" };
    let mut batch = Vec::with_capacity(BATCH);
    for i in 0..n {
        let order = draft_order(&mut rng, n_customers, now_ms);
        batch.push(orders::ActiveModel {
            id: NotSet,
            tenant_id: Set(tenant_id.to_owned()),
            customer_id: Set(ids[order.customer]),
            placed_at: Set(order.placed_at),
            country: Set(order.country.to_owned()),
            status: Set(order.status.to_owned()),
            total_cents: Set(order.total),
            currency: Set(currency.to_owned()),
            notes: Set(order.notes.to_owned()),
            order_ref: Set(Some(format!("SO-{:07}", i + 1))),
        });
        if batch.len() == BATCH || i + 1 == n {
            orders::Entity::insert_many(std::mem::take(&mut batch)).exec_without_returning(&txn).await?;
        }
    }
    txn.commit().await
}
