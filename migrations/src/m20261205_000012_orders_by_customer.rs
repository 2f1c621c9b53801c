//! Orders by their customer. An orders import recomputes the lifetime total of each customer a
//! batch touched from that customer's orders, and deleting a customer checks that no order
//! references it (two foreign keys, `customer_id` alone and `(tenant_id, customer_id)`):
//! without this index each was a scan of the orders, once per customer, so both grew with the
//! square of the table. The customer comes first so the one-column key's check uses it too.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

const UP: [&str; 1] = ["CREATE INDEX orders_customer ON orders (customer_id, tenant_id)"];

const DOWN: [&str; 1] = ["DROP INDEX orders_customer"];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::execute_all(manager, &UP).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        crate::execute_all(manager, &DOWN).await
    }
}
