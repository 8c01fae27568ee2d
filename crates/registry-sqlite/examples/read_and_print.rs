//! The floor for whole-process reads: open a registry file, read every ledger and worker
//! row with bare rusqlite into memory, and print them as JSON with serde_json.
//! `fleetctl snapshot --json` and `fleetctl retire plan --json` must do at least this
//! much (they judge the fleet as a whole, so they hold every row), and their times and
//! peak memory are reported as ratios to this program's (docs/PERFORMANCE.md). With
//! `--decode-only` it reads and decodes every row and prints nothing: the lower floor,
//! what any reader of the rows pays before it judges or writes anything.
//!
//! `cargo run --release -p registry-sqlite --example read_and_print -- [--decode-only] registry.sqlite3`

use std::io::Write as _;

use rusqlite::types::Value;
use serde::ser::{SerializeMap, SerializeSeq, Serializer};

/// One table: its column names and every row's values, in column order.
struct Table {
    columns: Vec<String>,
    rows: Vec<Vec<Value>>,
}

fn read(conn: &rusqlite::Connection, sql: &str) -> rusqlite::Result<Table> {
    let mut stmt = conn.prepare(sql)?;
    let columns: Vec<String> = stmt.column_names().map(str::to_owned).collect();
    let width = columns.len();
    let rows = stmt.query_map([], |row| (0..width).map(|i| row.get::<_, Value>(i)).collect())?;
    Ok(Table { rows: rows.collect::<rusqlite::Result<_>>()?, columns })
}

impl serde::Serialize for Table {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        struct Row<'a>(&'a [String], &'a [Value]);
        impl serde::Serialize for Row<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut map = s.serialize_map(Some(self.0.len()))?;
                for (name, value) in self.0.iter().zip(self.1) {
                    match value {
                        Value::Null => map.serialize_entry(name, &())?,
                        Value::Integer(n) => map.serialize_entry(name, n)?,
                        Value::Real(x) => map.serialize_entry(name, x)?,
                        Value::Text(t) => map.serialize_entry(name, t)?,
                        Value::Blob(b) => map.serialize_entry(name, b)?,
                    }
                }
                map.end()
            }
        }
        let mut seq = s.serialize_seq(Some(self.rows.len()))?;
        for row in &self.rows {
            seq.serialize_element(&Row(&self.columns, row))?;
        }
        seq.end()
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let decode_only = args.iter().any(|a| a == "--decode-only");
    let path = args
        .iter()
        .find(|a| !a.starts_with("--"))
        .ok_or("usage: read_and_print [--decode-only] REGISTRY_FILE")?;
    let conn = rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let instances = read(&conn, "SELECT * FROM instances ORDER BY client_instance_id")?;
    let workers = read(&conn, "SELECT * FROM worker_registrations ORDER BY worker_identity")?;
    if decode_only {
        // Kept alive to here, so their reading is not optimised away.
        std::hint::black_box((&instances.rows, &workers.rows));
        return Ok(());
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut s = serde_json::Serializer::pretty(&mut out);
    let mut map = s.serialize_map(Some(2))?;
    map.serialize_entry("instances", &instances)?;
    map.serialize_entry("worker_registrations", &workers)?;
    SerializeMap::end(map)?;
    out.flush()?;
    Ok(())
}
