//! The MCP server's library half: the tool router, the profiles that grant its
//! capabilities, and the stdio guard, which `fleet-mcp` runs and other tools (and the
//! fuzz targets) can link.
#![warn(missing_docs)]

pub mod codes;
mod pages;
pub mod profiles;
pub mod registration;
mod schemas;
pub mod server;
pub mod stdio;
