//! The stdio transport with JSON-RPC's error answers. The MCP SDK drops a line that is
//! not JSON, and answers well-formed JSON that is not a valid message without its id; a
//! client then waits forever for the request it sent. This guard sits between stdin and
//! the SDK: a line that is not JSON gets a parse error (-32700, id null), a request that
//! carries an id but is not a valid message gets an invalid-request error (-32600) with
//! that id, and every valid line passes through untouched. Answers and the SDK's own
//! output go to stdout whole line by whole line, never interleaved. On the way out it
//! also writes each large body a tool parked with [`Bodies`] in place of its placeholder.

use std::sync::{Arc, Mutex, PoisonError};

use rmcp::model::ClientJsonRpcMessage;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{
    AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream,
};
use tokio::sync::mpsc;

mod bodies;

pub use bodies::{Bodies, GrowingStdout};

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
    let id = value.get("id");
    let answerable = matches!(id, Some(Value::String(_) | Value::Number(_)));
    // tools/call whose params lack a string name, or carry arguments that are not an
    // object, is invalid params (-32602), not a method the server does not know.
    if answerable && value.get("method") == Some(&Value::from("tools/call")) {
        let params = value.get("params");
        let name_ok = params.and_then(|p| p.get("name")).is_some_and(Value::is_string);
        let arguments_ok =
            params.and_then(|p| p.get("arguments")).is_none_or(|a| a.is_object() || a.is_null());
        // Params that are not structured at all make the request itself invalid (below).
        if params.is_none_or(Value::is_object) && !(name_ok && arguments_ok) {
            let why =
                if !name_ok { "params.name must be a string" } else { "params.arguments must be an object" };
            return Verdict::Answer(error(
                id.cloned().unwrap_or_default(),
                -32602,
                format!("Invalid params: {why}"),
            ));
        }
    }
    if serde_json::from_value::<ClientJsonRpcMessage>(value.clone()).is_ok() {
        return Verdict::Pass;
    }
    match id {
        // JSON-RPC 2.0: an id that is neither a string nor a number is an invalid
        // request, answered with id null.
        Some(Value::Null | Value::Bool(_) | Value::Object(_) | Value::Array(_))
            if value.get("method").is_some() =>
        {
            Verdict::Answer(error(
                Value::Null,
                -32600,
                "Invalid Request: id must be a string or a number".into(),
            ))
        }
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

/// The protocol versions under which a client may send a JSON-RPC batch: 2025-03-26
/// requires servers to accept them, 2024-11-05 follows JSON-RPC 2.0, and 2025-06-18
/// removed them.
const BATCH_VERSIONS: [&str; 2] = ["2024-11-05", "2025-03-26"];

/// The batches whose answers are still being gathered: each answer the SDK writes for a
/// request of a batch is held until the batch is whole, then all go out as one array.
#[derive(Debug, Default)]
struct Batches {
    open: Vec<Batch>,
}

#[derive(Debug)]
struct Batch {
    /// The ids of the requests not answered yet.
    waiting: Vec<Value>,
    /// The answers so far, each one JSON object.
    answers: Vec<Vec<u8>>,
}

impl Batches {
    /// Takes `answer` (one outgoing line, bodies spliced in) into the batch that waits
    /// for its id; returns the batch's array once it is whole. `Err(answer)` when no
    /// batch waits for it.
    fn settle(&mut self, answer: Vec<u8>) -> Result<Option<Vec<u8>>, Vec<u8>> {
        #[derive(Deserialize)]
        struct Id {
            id: Option<Value>,
        }
        let Some(id) = serde_json::from_slice::<Id>(&answer).ok().and_then(|a| a.id) else {
            return Err(answer);
        };
        let Some(index) = self.open.iter().position(|b| b.waiting.contains(&id)) else { return Err(answer) };
        let batch = &mut self.open[index];
        batch.waiting.retain(|w| *w != id);
        let trimmed = answer.strip_suffix(b"\n").unwrap_or(&answer).to_vec();
        batch.answers.push(trimmed);
        if !batch.waiting.is_empty() {
            return Ok(None);
        }
        let batch = self.open.swap_remove(index);
        Ok(Some(array(&batch.answers)))
    }
}

/// `[a,b,…]` and a newline, from answers that are each one JSON text.
fn array(answers: &[Vec<u8>]) -> Vec<u8> {
    let mut out = vec![b'['];
    for (i, answer) in answers.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(answer);
    }
    out.extend_from_slice(b"]\n");
    out
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

/// The id of a request (a message with a method and an id), if `message` is one.
fn request_id(message: &[u8]) -> Option<Value> {
    #[derive(Deserialize)]
    struct Request {
        method: Option<serde::de::IgnoredAny>,
        id: Option<Value>,
    }
    let request: Request = serde_json::from_slice(message).ok()?;
    request.method.and(request.id)
}

/// The protocol version an `initialize` request asks for.
fn initialize_version(message: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(message).ok()?;
    if value.get("method")?.as_str()? != "initialize" {
        return None;
    }
    Some(value.get("params")?.get("protocolVersion")?.as_str()?.to_owned())
}

/// Writes bytes that are already one whole line, and flushes.
async fn write_all<W: AsyncWrite + Unpin>(output: &mut W, line: &[u8]) -> std::io::Result<()> {
    output.write_all(line).await?;
    output.flush().await
}

/// `line` with a parked body in place of its placeholder, as [`write_line`] sends it.
pub(crate) fn spliced(bodies: &Bodies, line: &[u8]) -> Vec<u8> {
    match bodies.take(line) {
        Some((head, body, tail)) => [head, &body, tail].concat(),
        None => line.to_vec(),
    }
}

/// Writes one outgoing line, with a parked body in place of its placeholder.
async fn write_line<W: AsyncWrite + Unpin>(
    output: &mut W,
    bodies: &Bodies,
    line: &[u8],
) -> std::io::Result<()> {
    match bodies.take(line) {
        Some((head, body, tail)) => {
            output.write_all(head).await?;
            output.write_all(&body).await?;
            output.write_all(tail).await?;
        }
        None => output.write_all(line).await?,
    }
    output.flush().await
}

/// Starts the guard over `input` and `output`; returns the reader and writer the SDK
/// should use as its transport, and the task that writes to `output`: it ends once the
/// SDK's side is closed and every line the SDK wrote is out whole, so a caller that
/// awaits it before exiting never leaves a cut line on stdout. Bodies parked in `bodies`
/// are written in place of their placeholders.
pub fn guard<R, W>(
    input: R,
    output: W,
    bodies: Arc<Bodies>,
) -> ((DuplexStream, DuplexStream), tokio::task::JoinHandle<()>)
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (sdk_in, mut to_sdk) = tokio::io::duplex(1 << 20);
    let (sdk_out, from_sdk) = tokio::io::duplex(1 << 20);
    let (answers, mut answer_rx) = mpsc::unbounded_channel::<Vec<u8>>();
    let batches = Arc::new(Mutex::new(Batches::default()));
    let reader_batches = Arc::clone(&batches);
    let answer = move |value: Value| {
        let mut text = value.to_string().into_bytes();
        text.push(b'\n');
        text
    };

    tokio::spawn(async move {
        let mut reader = BufReader::new(input);
        let mut line = Vec::new();
        // The protocol version the client asked for in `initialize`.
        let mut version: Option<String> = None;
        while let Ok(Some(fits)) = read_line(&mut reader, &mut line).await {
            if !fits {
                let _ = answers.send(answer(error(
                    Value::Null,
                    -32600,
                    "Invalid Request: message too large".into(),
                )));
                continue;
            }
            let body = line.strip_suffix(b"\n").unwrap_or(&line);
            let body = body.strip_suffix(b"\r").unwrap_or(body);
            if body.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            if body.first() == Some(&b'[') {
                let batch_ok = version.as_deref().is_some_and(|v| BATCH_VERSIONS.contains(&v));
                match serde_json::from_slice::<Vec<Box<serde_json::value::RawValue>>>(body) {
                    Ok(items) if batch_ok && !items.is_empty() => {
                        let mut messages = Vec::new();
                        let mut batch = Batch { waiting: Vec::new(), answers: Vec::new() };
                        for item in &items {
                            let item = item.get().as_bytes();
                            match judge(item) {
                                Verdict::Pass => {
                                    if let Some(id) = request_id(item) {
                                        batch.waiting.push(id);
                                    }
                                    messages.push(item);
                                }
                                Verdict::Answer(value) => batch.answers.push(value.to_string().into_bytes()),
                                Verdict::Drop => {}
                            }
                        }
                        if batch.waiting.is_empty() {
                            if !batch.answers.is_empty() {
                                let _ = answers.send(array(&batch.answers));
                            }
                        } else {
                            reader_batches.lock().unwrap_or_else(PoisonError::into_inner).open.push(batch);
                        }
                        for message in messages {
                            if to_sdk.write_all(message).await.is_err()
                                || to_sdk.write_all(b"\n").await.is_err()
                            {
                                return;
                            }
                        }
                        continue;
                    }
                    Ok(items) if batch_ok && items.is_empty() => {
                        let _ = answers.send(answer(error(
                            Value::Null,
                            -32600,
                            "Invalid Request: an empty batch".into(),
                        )));
                        continue;
                    }
                    Ok(_) => {
                        let why = format!(
                            "Invalid Request: JSON-RPC batches are not supported under protocol version {}",
                            version.as_deref().unwrap_or("(none negotiated)")
                        );
                        let _ = answers.send(answer(error(Value::Null, -32600, why)));
                        continue;
                    }
                    Err(_) => {}
                }
            }
            match judge(body) {
                Verdict::Pass => {
                    if version.is_none() {
                        version = initialize_version(body);
                    }
                    if to_sdk.write_all(&line).await.is_err() {
                        break;
                    }
                    if line.last() != Some(&b'\n') && to_sdk.write_all(b"\n").await.is_err() {
                        break;
                    }
                }
                Verdict::Answer(value) => {
                    let _ = answers.send(answer(value));
                }
                Verdict::Drop => {}
            }
        }
        // End of input: closing the SDK's side ends the session.
    });

    let writer = tokio::spawn(async move {
        let mut output = output;
        let mut from_sdk = BufReader::new(from_sdk);
        let mut line = Vec::new();
        let mut answering = true;
        loop {
            tokio::select! {
                read = from_sdk.read_until(b'\n', &mut line) => {
                    match read {
                        // The session is over and all it wrote is out.
                        Ok(0) | Err(_) => return,
                        Ok(_) => {
                            let held = {
                                let mut open = batches.lock().unwrap_or_else(PoisonError::into_inner);
                                if open.open.is_empty() {
                                    None
                                } else {
                                    Some(open.settle(spliced(&bodies, &line)))
                                }
                            };
                            let written = match held {
                                None => write_line(&mut output, &bodies, &line).await,
                                Some(Ok(None)) => Ok(()),
                                Some(Ok(Some(whole)) | Err(whole)) => write_all(&mut output, &whole).await,
                            };
                            if written.is_err() {
                                return;
                            }
                            line.clear();
                        }
                    }
                }
                answer = answer_rx.recv(), if answering => {
                    // Answers to bad lines end with the reader; the SDK's side may go on.
                    let Some(answer) = answer else {
                        answering = false;
                        continue;
                    };
                    if write_all(&mut output, &answer).await.is_err() {
                        return;
                    }
                }
                else => return,
            }
        }
    });

    ((sdk_in, sdk_out), writer)
}

#[cfg(test)]
mod tests {
    use super::bodies::PLACEHOLDER_KEY;
    use super::*;

    #[test]
    fn an_id_of_the_wrong_type_and_bad_tool_call_params_get_their_codes() {
        for id in ["null", "true", "{}", "[1]"] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
            let Verdict::Answer(a) = judge(line.as_bytes()) else { panic!("{id} is answered") };
            assert_eq!((a["id"].clone(), a["error"]["code"].clone()), (Value::Null, json!(-32600)), "{id}");
        }
        for params in [
            r#"{"name":"gitea_get_runtime_context","arguments":"x"}"#,
            r#"{"arguments":{}}"#,
            r#"{"name":5}"#,
        ] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{params}}}"#);
            let Verdict::Answer(a) = judge(line.as_bytes()) else { panic!("{params} is answered") };
            assert_eq!((a["id"].clone(), a["error"]["code"].clone()), (json!(3), json!(-32602)), "{params}");
        }
        let line = br#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"x","arguments":{}}}"#;
        assert_eq!(judge(line), Verdict::Pass);
    }

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

    /// A parked body replaces exactly its own placeholder, once; the same text inside a
    /// string, another process's placeholder or an unknown number pass untouched.
    #[test]
    fn a_parked_body_replaces_only_its_own_placeholder_once() {
        let bodies = Bodies::new();
        let placeholder = bodies.park(br#"{"big":[1,2,3]}"#.to_vec());
        let line =
            serde_json::to_vec(&json!({"id": 1, "result": {"structuredContent": placeholder}})).unwrap();
        let sent: Value = serde_json::from_slice(&spliced(&bodies, &line)).unwrap();
        assert_eq!(sent, json!({"id": 1, "result": {"structuredContent": {"big": [1, 2, 3]}}}));
        assert_eq!(spliced(&bodies, &line), line, "written once, then gone");

        let quoted = bodies.park(b"[]".to_vec());
        let in_text = serde_json::to_vec(&json!({"text": quoted.to_string()})).unwrap();
        assert_eq!(spliced(&bodies, &in_text), in_text, "inside a string its quotes are escaped");
        let other = Bodies::new();
        let foreign = serde_json::to_vec(&other.park(b"[]".to_vec())).unwrap();
        assert_eq!(spliced(&bodies, &foreign), foreign, "another nonce");
        let unknown = serde_json::to_vec(&json!({PLACEHOLDER_KEY: format!("{}-99", bodies.nonce)})).unwrap();
        assert_eq!(spliced(&bodies, &unknown), unknown, "nothing parked under that number");
        let placeholder = serde_json::to_vec(&quoted).unwrap();
        assert_eq!(spliced(&bodies, &placeholder), b"[]", "still parked until its line goes out");
    }
}
