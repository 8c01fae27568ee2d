//! This process and the host it runs on, as the registry records them: the process
//! evidence a worker registers with, and the descriptor limit a tracking probe needs.
//! The binaries reach the operating system's probe through here only.

pub use fleet_probe::{ProbeError, current_process, host_id, process_identity, raise_open_file_limit};
