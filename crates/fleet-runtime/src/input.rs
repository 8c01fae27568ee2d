//! Files a command reads (an import, a manifest, an earlier snapshot): bounded in size
//! and parsed as they stream in, so an endless or hostile input (`/dev/zero`, a pipe that
//! never ends) is refused at its first wrong byte or at its limit, in little memory.

use std::io::{self, BufReader, Read};
use std::path::Path;

/// Reads the JSON document at `path` (`-`: standard input), the command's `what`
/// (`manifest`, …), refusing it past `max_bytes`; `flag` names the option that raises
/// the limit. The error is one line naming the file.
///
/// # Errors
/// When the file cannot be read, is not one JSON document, or is larger than the limit.
pub fn read_json(path: &Path, what: &str, max_bytes: u64, flag: &str) -> Result<serde_json::Value, String> {
    let shown = format!("{what} {}", path.display());
    read_streamed(path, what, max_bytes, flag, |reader| {
        serde_json::from_reader::<_, serde_json::Value>(BufReader::new(reader))
    })?
    .map_err(|e| match e.classify() {
        serde_json::error::Category::Io => format!("cannot read {shown}: {e}"),
        _ => format!("{shown} is not valid JSON: {e}"),
    })
}

/// Hands the file at `path` (`-`: standard input) to `parse` as a stream that ends at
/// `max_bytes`, and what `parse` made of it, unless the file was larger: then the error
/// names the limit and `flag`, whatever `parse` said of the cut stream. A caller that
/// writes as it parses must write in a transaction that `parse` failing undoes.
///
/// # Errors
/// When the file cannot be opened, or is larger than the limit.
pub fn read_streamed<T>(
    path: &Path,
    what: &str,
    max_bytes: u64,
    flag: &str,
    parse: impl FnOnce(&mut dyn Read) -> T,
) -> Result<T, String> {
    let shown = format!("{what} {}", path.display());
    let source: Box<dyn Read> = if path.as_os_str() == "-" {
        Box::new(io::stdin().lock())
    } else {
        let file = std::fs::File::open(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
        if file.metadata().is_ok_and(|m| m.is_dir()) {
            return Err(format!("{shown} is a directory, not a file"));
        }
        Box::new(file)
    };
    // The byte past the limit is never handed on: the read fails there, so `parse` fails
    // before it could act on a whole document that is over the limit.
    let mut counted = Counted { inner: source, read: 0, limit: max_bytes, over: false };
    let parsed = parse(&mut counted);
    if counted.over {
        return Err(format!(
            "{shown} is larger than {max_bytes} bytes, this input's limit (raise it with {flag})"
        ));
    }
    Ok(parsed)
}

/// A reader that counts the bytes it has passed on, and fails rather than pass on one
/// past `limit`.
struct Counted<R> {
    inner: R,
    read: u64,
    limit: u64,
    over: bool,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // One byte more than the limit allows is asked for, to tell "exactly at the
        // limit" from "past it".
        let room =
            usize::try_from(self.limit.saturating_sub(self.read).saturating_add(1)).unwrap_or(usize::MAX);
        let take = buf.len().min(room);
        let n = self.inner.read(&mut buf[..take])?;
        if self.read + n as u64 > self.limit {
            self.over = true;
            return Err(io::Error::other("the input is larger than its limit"));
        }
        self.read += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_input_is_refused_at_its_first_wrong_byte() {
        let err = read_json(Path::new("/dev/zero"), "manifest", 1 << 30, "--max-input-bytes").unwrap_err();
        assert!(err.starts_with("manifest /dev/zero is not valid JSON"), "{err}");
    }

    #[test]
    fn an_input_past_its_limit_is_refused_naming_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("padded.json");
        std::fs::write(&path, format!("{{}}{}", " ".repeat(100))).unwrap();
        let err = read_json(&path, "manifest", 50, "--max-input-bytes").unwrap_err();
        assert!(err.contains("larger than 50 bytes") && err.contains("--max-input-bytes"), "{err}");
        assert_eq!(read_json(&path, "manifest", 102, "--max-input-bytes").unwrap(), serde_json::json!({}));
    }
}
