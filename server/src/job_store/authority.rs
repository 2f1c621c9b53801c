//! "Authorised" (SPEC §2) as a condition the database checks inside a worker's fenced writes, so
//! a revocation that lands between a check and a write still stops the write. The rules
//! themselves are [`Role::may_export_contract`] and [`Role::may_import`]; this only lists the
//! roles they allow.

use crate::auth::Role;
use crate::entities::{jobs, schedules, users};
use sea_orm::sea_query::{Alias, Expr, ExprTrait, JoinType, Query};

/// What the job's actor must still be allowed to do for a fenced write to go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    /// Export a contract whose resolved columns do or do not include PII columns.
    Export {
        /// Whether they do.
        needs_pii: bool,
        /// The roles the report names.
        roles: crate::catalog::Roles,
    },
    /// Import (SPEC §10).
    Import,
}

impl Permission {
    /// The names of the roles that may do it.
    pub fn roles(self) -> Vec<&'static str> {
        Role::ALL.into_iter().filter(|r| self.allows(*r)).map(Role::as_str).collect()
    }

    /// Whether `role` may do it.
    pub fn allows(self, role: Role) -> bool {
        match self {
            Permission::Export { needs_pii, roles } => roles.allows(role) && role.may_export_contract(needs_pii),
            Permission::Import => role.may_import(),
        }
    }

    /// `EXISTS (…)`: the job's actor exists, is active, belongs to the job's tenant and, when
    /// `stored_role` (the role is the one in `users`, not the catalog's authority query's), has a
    /// role that may do it.
    pub fn condition(self, stored_role: bool) -> Expr {
        let mut query = Query::select();
        query
            .expr(Expr::val(1))
            .from(users::Entity)
            .and_where(Expr::col((users::Entity, users::Column::Id)).equals((jobs::Entity, jobs::Column::ActorId)))
            .and_where(Expr::col((users::Entity, users::Column::TenantId)).equals((jobs::Entity, jobs::Column::TenantId)))
            .and_where(Expr::col((users::Entity, users::Column::Active)).eq(true));
        if stored_role {
            query.and_where(Expr::col((users::Entity, users::Column::Role)).is_in(self.roles()));
        }
        // A schedule's service identity acts while its owner is active (with a stored role, and
        // has a role that may do it): its role is the lesser of the schedule's and the owner's.
        let owner = Alias::new("owner");
        let mut owned = Query::select();
        owned
            .expr(Expr::val(1))
            .from(schedules::Entity)
            .join_as(JoinType::InnerJoin, users::Entity, owner.clone(), Expr::col((owner.clone(), users::Column::Id)).equals((schedules::Entity, schedules::Column::OwnerId)))
            .and_where(Expr::col((schedules::Entity, schedules::Column::Id)).equals((users::Entity, users::Column::ScheduleId)))
            .and_where(Expr::col((owner.clone(), users::Column::Active)).eq(true));
        if stored_role {
            owned.and_where(Expr::col((owner, users::Column::Role)).is_in(self.roles()));
        }
        query.and_where(Expr::col((users::Entity, users::Column::ScheduleId)).is_null().or(Expr::exists(owned.to_owned())));
        Expr::exists(query.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_admins_may_export_pii_or_import_and_viewers_may_export_nothing() {
        let both = crate::catalog::Roles { admin: true, analyst: true };
        assert_eq!(Permission::Export { needs_pii: true, roles: both }.roles(), vec!["admin"]);
        assert_eq!(Permission::Export { needs_pii: false, roles: both }.roles(), vec!["admin", "analyst"]);
        let admins = crate::catalog::Roles { admin: true, analyst: false };
        assert_eq!(Permission::Export { needs_pii: false, roles: admins }.roles(), vec!["admin"], "a report's roles narrow the rule");
        assert_eq!(Permission::Import.roles(), vec!["admin"]);
    }
}
