//! Control of this host's processes, below the use cases: the keeper that runs a
//! command under a lease or a registration and takes its whole tree when authority
//! ends (`keeper`), the tenure that ends the trees of former holders before a new one
//! runs (`tenure`), this process's identity, host and boot clock (`process`), and the
//! one-line diagnostics they and the runtime write on standard error.
//!
//! It knows no registry: what authority a command runs under (a lease's epoch, a
//! deadline on the boot clock) is handed to it.
//!
//! ```
//! use fleet_host::process;
//!
//! // The boot clock never jumps with the wall clock: deadlines on it hold across a
//! // paused or stepped clock.
//! let before = process::boot_clock();
//! assert!(process::boot_clock() >= before);
//! if let Some((host, boot)) = process::current_host() {
//!     println!("this is {host} in boot {boot}");
//! }
//! ```

#![deny(missing_docs)]

mod diagnostics;
pub mod keeper;
pub mod process;
pub mod tenure;

pub use diagnostics::{diagnostics_are_json, json_diagnostics, notice, warn};
