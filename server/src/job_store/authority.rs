//! "Authorised" (SPEC §2) as a condition the database checks inside a worker's fenced writes, so
//! a revocation that lands between a check and a write still stops the write. The rule itself
//! is [`Role::may_export_contract`]; this only lists the roles it allows.

use crate::auth::Role;
use crate::entities::{jobs, users};
use sea_orm::sea_query::{Expr, ExprTrait, Query};

/// What the export's actor must still be allowed to do for a fenced write to go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Authority {
    /// Whether the export's resolved columns include PII columns.
    pub needs_pii: bool,
}

impl Authority {
    /// The names of the roles that may export such a contract.
    pub fn roles(self) -> Vec<&'static str> {
        Role::ALL.into_iter().filter(|r| r.may_export_contract(self.needs_pii)).map(Role::as_str).collect()
    }

    /// `EXISTS (…)`: the export's actor exists, is active, belongs to the export's tenant and has
    /// a role that may export the contract.
    pub fn condition(self) -> Expr {
        Expr::exists(
            Query::select()
                .expr(Expr::val(1))
                .from(users::Entity)
                .and_where(Expr::col((users::Entity, users::Column::Id)).equals((jobs::Entity, jobs::Column::ActorId)))
                .and_where(Expr::col((users::Entity, users::Column::TenantId)).equals((jobs::Entity, jobs::Column::TenantId)))
                .and_where(Expr::col((users::Entity, users::Column::Active)).eq(true))
                .and_where(Expr::col((users::Entity, users::Column::Role)).is_in(self.roles()))
                .to_owned(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_admins_may_export_pii_and_viewers_may_export_nothing() {
        assert_eq!(Authority { needs_pii: true }.roles(), vec!["admin"]);
        assert_eq!(Authority { needs_pii: false }.roles(), vec!["admin", "analyst"]);
    }
}
