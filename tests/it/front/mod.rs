//! tasklift's front door as its callers meet it: what it accepts and how it refuses
//! the rest (`door`), principals and ownership (`auth_ownership`), the security suite
//! for an auditor (`security`), every message it writes checked against the published
//! schemas (`schemas`), and real 2025-era SDK clients whose timeout is shorter than
//! a slow call (`slow_clients`).

mod auth_ownership;
mod door;
mod schemas;
mod security;
mod slow_clients;
