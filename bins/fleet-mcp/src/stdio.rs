//! The stdio transport with JSON-RPC's error answers. The MCP SDK drops a line that is
//! not JSON, and answers well-formed JSON that is not a valid message without its id; a
//! client then waits forever for the request it sent. This guard sits between stdin and
//! the SDK: a line that is not JSON gets a parse error (-32700, id null), a request that
//! carries an id but is not a valid message gets an invalid-request error (-32600) with
//! that id, and every valid line passes through untouched. Answers and the SDK's own
//! output go to stdout whole line by whole line, never interleaved.

use rmcp::model::ClientJsonRpcMessage;
use serde_json::{Value, json};
use tokio::io::{
    AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream,
};
use tokio::sync::mpsc;

/// The longest message accepted, as the SDK's own limit.
const MAX_LINE: usize = 16 * 1024 * 1024;

/// What to do with one line from the client.
#[derive(Debug, PartialEq)]
enum Verdict {
    /// A valid message: hand it to the SDK.
    Pass,
    /// Answer with this error response.
    Answer(Value),
    /// Nothing to answer (an invalid notification or response has no id to answer).
    Drop,
}

fn error(id: Value, code: i64, message: String) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}

fn judge(line: &[u8]) -> Verdict {
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(e) => return Verdict::Answer(error(Value::Null, -32700, format!("Parse error: {e}"))),
    };
    if serde_json::from_value::<ClientJsonRpcMessage>(value.clone()).is_ok() {
        return Verdict::Pass;
    }
    match value.get("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) if value.get("method").is_some() => {
            let detail = serde_json::from_value::<ClientJsonRpcMessage>(value.clone())
                .err()
                .map_or_else(String::new, |e| e.to_string());
            Verdict::Answer(error(id.clone(), -32600, format!("Invalid Request: {detail}")))
        }
        _ if !value.is_object() => {
            Verdict::Answer(error(Value::Null, -32600, "Invalid Request: not a JSON-RPC object".into()))
        }
        _ => Verdict::Drop,
    }
}

/// Reads one line of at most [`MAX_LINE`] bytes into `buf`; `Ok(false)` at the end of
/// input. A longer line is consumed whole and reported as oversized (`buf` cleared).
async fn read_line<R: AsyncRead + Unpin>(
    reader: &mut BufReader<R>,
    buf: &mut Vec<u8>,
) -> std::io::Result<Option<bool>> {
    buf.clear();
    let limit = u64::try_from(MAX_LINE + 1).unwrap_or(u64::MAX);
    let n = (&mut *reader).take(limit).read_until(b'\n', buf).await?;
    if n == 0 {
        return Ok(None);
    }
    if buf.len() > MAX_LINE && buf.last() != Some(&b'\n') {
        // Skip the rest of the oversized line.
        let mut rest = Vec::new();
        loop {
            rest.clear();
            let n = (&mut *reader).take(limit).read_until(b'\n', &mut rest).await?;
            if n == 0 || rest.last() == Some(&b'\n') {
                break;
            }
        }
        buf.clear();
        return Ok(Some(false));
    }
    Ok(Some(true))
}

/// Starts the guard over `input` and `output`; returns the reader and writer the SDK
/// should use as its transport.
pub fn guard<R, W>(input: R, output: W) -> (DuplexStream, DuplexStream)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (sdk_in, mut to_sdk) = tokio::io::duplex(1 << 20);
    let (sdk_out, from_sdk) = tokio::io::duplex(1 << 20);
    let (answers, mut answer_rx) = mpsc::unbounded_channel::<Value>();

    tokio::spawn(async move {
        let mut reader = BufReader::new(input);
        let mut line = Vec::new();
        while let Ok(Some(fits)) = read_line(&mut reader, &mut line).await {
            if !fits {
                let _ = answers.send(error(Value::Null, -32600, "Invalid Request: message too large".into()));
                continue;
            }
            let body = line.strip_suffix(b"\n").unwrap_or(&line);
            let body = body.strip_suffix(b"\r").unwrap_or(body);
            if body.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match judge(body) {
                Verdict::Pass => {
                    if to_sdk.write_all(&line).await.is_err() {
                        break;
                    }
                    if line.last() != Some(&b'\n') && to_sdk.write_all(b"\n").await.is_err() {
                        break;
                    }
                }
                Verdict::Answer(answer) => {
                    let _ = answers.send(answer);
                }
                Verdict::Drop => {}
            }
        }
        // End of input: closing the SDK's side ends the session.
    });

    tokio::spawn(async move {
        let mut output = output;
        let mut from_sdk = BufReader::new(from_sdk);
        let mut line = Vec::new();
        let mut sdk_open = true;
        loop {
            tokio::select! {
                read = from_sdk.read_until(b'\n', &mut line), if sdk_open => {
                    match read {
                        Ok(0) | Err(_) => sdk_open = false,
                        Ok(_) => {
                            if output.write_all(&line).await.is_err() || output.flush().await.is_err() {
                                return;
                            }
                            line.clear();
                        }
                    }
                }
                answer = answer_rx.recv() => {
                    let Some(answer) = answer else {
                        if !sdk_open { return; }
                        continue;
                    };
                    let mut text = answer.to_string();
                    text.push('\n');
                    if output.write_all(text.as_bytes()).await.is_err() || output.flush().await.is_err() {
                        return;
                    }
                }
                else => return,
            }
        }
    });

    (sdk_in, sdk_out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_bad_line_gets_its_answer() {
        let Verdict::Answer(a) = judge(b"garbage") else { panic!("garbage is answered") };
        assert_eq!((a["id"].clone(), a["error"]["code"].clone()), (Value::Null, json!(-32700)));
        let Verdict::Answer(a) = judge(br#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":"x"}"#)
        else {
            panic!("a malformed request with an id is answered")
        };
        assert_eq!((a["id"].clone(), a["error"]["code"].clone()), (json!(7), json!(-32600)));
        let Verdict::Answer(a) = judge(br#"{"jsonrpc":"2.0","id":"a","method":5}"#) else {
            panic!("answered")
        };
        assert_eq!(a["id"], "a");
        assert!(matches!(judge(b"[1,2]"), Verdict::Answer(_)));
        assert_eq!(
            judge(br#"{"jsonrpc":"2.0","method":"notifications/nonsense","params":5}"#),
            Verdict::Drop
        );
        assert_eq!(judge(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#), Verdict::Pass);
    }
}
