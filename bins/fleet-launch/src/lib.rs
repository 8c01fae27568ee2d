//! The launcher's library half: the agent clients' config writers, which `fleet-launch
//! config|install|uninstall` use and which other tools (and the fuzz targets) can link.
#![warn(missing_docs)]

pub mod clients;
