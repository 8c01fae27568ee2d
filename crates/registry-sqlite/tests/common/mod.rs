//! What the SQLite registry's tests share.
#![allow(unreachable_pub)]

/// The digest of the rows' versions as the triggers keep it in `registry_changes`, and
/// as the rows themselves give it: `((rows, sum), (rows, sum))`.
pub fn digests(conn: &rusqlite::Connection) -> ((i64, i64), (i64, i64)) {
    let kept = conn
        .query_row("SELECT worker_rows, worker_version_sum FROM registry_changes", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    let rows = conn
        .query_row(
            "SELECT count(*), coalesce(sum(change_seq & 4294967295), 0) FROM worker_registrations",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    (kept, rows)
}
