//! Children that `fleetctl` owns: they die with it, and a worker does not start before it
//! is registered.
//!
//! Dying with the owner is `PR_SET_PDEATHSIG(SIGKILL)`: the kernel kills the child when
//! the thread that spawned it ends, however it ends (a SIGKILL included), so an
//! initialization taken over after its owner died never runs twice at once.
//!
//! Holding a worker until it is registered uses a small gate: the child first runs
//! `fleetctl __gate -- CMD…`, which waits on a pipe for one byte and then execs `CMD`
//! in place. The pid and start time the registry records are the gate's, and stay the
//! worker's across the exec. If registration fails, or the owner dies first, the pipe
//! closes without the byte and the gate exits without ever running `CMD`.

use std::ffi::OsString;
use std::io::{PipeWriter, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitCode};

use nix::sys::prctl;
use nix::sys::signal::Signal;

/// The file descriptor on which the gate reads its go-ahead.
const GATE_FD: i32 = 3;

/// Exit status of a gate that was never told to go: the worker never ran.
const NOT_STARTED: u8 = 125;

/// Makes the child of `cmd` die when this thread ends.
pub(crate) fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl(2) is async-signal-safe, which is all a pre_exec hook may call.
    unsafe {
        cmd.pre_exec(|| prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from));
    }
}

/// A child that has been created but holds before running its command.
#[derive(Debug)]
pub(crate) struct HeldChild {
    child: Child,
    gate: PipeWriter,
}

impl HeldChild {
    /// Creates the child, dying with this thread, held before `program` runs.
    pub(crate) fn spawn(program: &OsString, args: &[OsString]) -> std::io::Result<Self> {
        let (reader, gate) = std::io::pipe()?;
        let reader: OwnedFd = reader.into();
        let raw = reader.as_raw_fd();
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.arg("__gate").arg("--").arg(program).args(args);
        // SAFETY: prctl(2) and dup2(2) are async-signal-safe. dup2 leaves the new
        // descriptor without close-on-exec, so the gate inherits it.
        unsafe {
            cmd.pre_exec(move || {
                prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
                // dup2 onto itself keeps close-on-exec, so then clear it by hand.
                let moved = if raw == GATE_FD {
                    nix::libc::fcntl(GATE_FD, nix::libc::F_SETFD, 0)
                } else {
                    nix::libc::dup2(raw, GATE_FD)
                };
                if moved < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        drop(reader);
        Ok(Self { child, gate })
    }

    /// The child's pid, the same before and after its command starts.
    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    /// Lets the command run.
    pub(crate) fn release(mut self) -> std::io::Result<Child> {
        self.gate.write_all(b"g")?;
        Ok(self.child)
    }

    /// Ends the child without its command ever running.
    pub(crate) fn abort(mut self) {
        drop(self.gate);
        let _ = self.child.wait();
    }
}

/// `fleetctl __gate -- CMD…`: waits for the go-ahead on the gate descriptor, then becomes
/// `CMD`. Without the go-ahead it exits with status 125 and runs nothing.
pub(crate) fn gate(command: &[OsString]) -> ExitCode {
    // SAFETY: descriptor 3 was placed here by `HeldChild::spawn` for this process alone.
    let mut gate = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(GATE_FD) });
    let mut go = [0u8; 1];
    let released = matches!(gate.read(&mut go), Ok(1));
    drop(gate);
    let Some((program, args)) = command.split_first().filter(|_| released) else {
        return ExitCode::from(NOT_STARTED);
    };
    let err = Command::new(program).args(args).exec();
    fleet_runtime::warn(format_args!("fleetctl: cannot run {}: {err}", program.to_string_lossy()));
    ExitCode::from(127)
}

/// Whether `program` names a file this process may execute, found as `execvp` finds it
/// (a name with a slash as given, else the first match on `PATH`): checked before any
/// registry row is written for it, so a command that cannot run is refused up front.
pub(crate) fn check_executable(program: &std::ffi::OsStr) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};
    let runnable = |path: &Path| {
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            && nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).is_ok()
    };
    let shown = program.to_string_lossy();
    if program.as_encoded_bytes().contains(&b'/') {
        return if runnable(Path::new(program)) {
            Ok(())
        } else {
            Err(format!("cannot run {shown}: no such executable file"))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    if std::env::split_paths(&path).map(|dir: PathBuf| dir.join(program)).any(|p| runnable(&p)) {
        Ok(())
    } else {
        Err(format!("cannot run {shown}: not found on PATH"))
    }
}
