//! An actor's jobs of one kind, newest first, a page at a time (SPEC §3's lists of exports and
//! of imports): the cursor is opaque, base64url of the last item's creation time and id.

use super::intake::Owner;
use super::kind::JobKind;
use crate::entities::jobs;
use sea_orm::{ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect};

/// One page.
#[derive(Debug)]
pub struct Page {
    /// The jobs, newest first.
    pub rows: Vec<jobs::Model>,
    /// Where the next page starts; `None` on the last page.
    pub next_cursor: Option<String>,
}

/// Why a page could not be read.
#[derive(Debug)]
pub enum ListError {
    /// The cursor is not one this API gave out (for this kind).
    BadCursor,
    /// The database failed.
    Db(DbErr),
}

impl From<DbErr> for ListError {
    fn from(e: DbErr) -> ListError {
        ListError::Db(e)
    }
}

fn encode_cursor(m: &jobs::Model) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{}:{}", m.created_at, m.id))
}

fn decode_cursor(cursor: &str, kind: JobKind) -> Option<(i64, String)> {
    use base64::Engine;
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(cursor).ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (at, id) = text.split_once(':')?;
    let at = at.parse().ok()?;
    (JobKind::of_id(id) == Some(kind)).then(|| (at, id.to_owned()))
}

/// `owner`'s jobs of `kind`, `limit` of them, after `cursor`.
pub async fn page<C: ConnectionTrait>(db: &C, owner: Owner<'_>, kind: JobKind, limit: u64, cursor: Option<&str>) -> Result<Page, ListError> {
    let mut query = jobs::Entity::find()
        .filter(jobs::Column::TenantId.eq(owner.tenant_id))
        .filter(jobs::Column::ActorId.eq(owner.actor_id))
        .filter(jobs::Column::Kind.eq(kind.as_str()));
    if let Some(cursor) = cursor {
        let (at, id) = decode_cursor(cursor, kind).ok_or(ListError::BadCursor)?;
        query = query.filter(
            Condition::any()
                .add(jobs::Column::CreatedAt.lt(at))
                .add(Condition::all().add(jobs::Column::CreatedAt.eq(at)).add(jobs::Column::Id.lt(id))),
        );
    }
    let mut rows = query.order_by_desc(jobs::Column::CreatedAt).order_by_desc(jobs::Column::Id).limit(limit + 1).all(db).await?;
    let next_cursor = if rows.len() as u64 > limit {
        rows.truncate(limit as usize);
        rows.last().map(encode_cursor)
    } else {
        None
    };
    Ok(Page { rows, next_cursor })
}
