//! Snapshot summaries kept between calls: a summary of a fleet that has not changed
//! since the last one (but for heartbeats of live workers) is that summary with its
//! time, token and moved heartbeats brought up to date, and the live heartbeats of
//! recent answers are kept for `compare_to`.

use super::*;

/// A summary answered from snapshot `number`: another summary of the same page of an
/// unchanged fleet is this body with its time and token moved.
#[derive(Debug)]
pub(super) struct KeptSummary {
    pub(super) number: u64,
    pub(super) page: SnapshotPage,
    pub(super) body: crate::pages::Summary,
    /// The live heartbeats as of the last answer from it, and how many changes of the
    /// fleet's judgement they follow: the next answer moves only those moved since.
    pub(super) heartbeats: LiveHeartbeats,
    pub(super) follows: u64,
}

/// The live heartbeats of the snapshots last answered, by consistency token, newest last.
pub(super) type Recent = std::collections::VecDeque<(String, LiveHeartbeats)>;

/// How many answered snapshots `compare_to` can name.
pub(super) const RECENT_SNAPSHOTS: usize = 8;

impl FleetServer {
    /// The summary `page` of the fleet now. When the fleet is as it was at the last
    /// summary of the same page (the same rows but for heartbeats of workers live then
    /// and now, probe answers and policy, no manifest, no heartbeat lapsed since), that
    /// summary is answered again with its time, token and the workers shown whose
    /// heartbeat moved brought up to date, without classifying the fleet again.
    pub(super) fn summary(
        &self,
        page: SnapshotPage,
        own: Option<&str>,
        manifest: Option<&Manifest>,
        policy: &Policy,
        compare_to: Option<&str>,
    ) -> Result<CallToolResult, CallToolResult> {
        let unavailable = |e: StoreError| refuse(Refusal::RegistryUnavailable, e);
        let mut fleet = self.fleet();
        let at = now();
        let (number, snapshot_at, consistency_token, moved) = match fleet
            .json_snapshot_or_unchanged(manifest, policy, at)
            .map_err(unavailable)?
        {
            Taken::Fresh(number, taken) => return self.fresh_summary(number, &taken, page, own, compare_to),
            Taken::Unchanged { number, snapshot_at, consistency_token, moved } => {
                (number, snapshot_at, consistency_token, moved)
            }
        };
        let kept = {
            let mut kept = self.summary.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let same = kept.as_mut().filter(|k| k.number == number && k.page == page);
            same.map(|k| {
                let since = moved.since(k.follows);
                let beats = since.views().filter_map(|v| Some((v.worker_identity().as_str(), v.heartbeat?)));
                k.heartbeats = k.heartbeats.moved_at(snapshot_at, beats);
                k.follows = moved.follows();
                (k.body.clone(), k.heartbeats.clone())
            })
        };
        if let Some((mut body, heartbeats)) = kept {
            body.snapshot_at = snapshot_at;
            (body.consistency_token, body.registry_revision) =
                (consistency_token.clone(), consistency_token.clone());
            // The workers shown whose heartbeat moved: their new heartbeat and expiry.
            for worker in &mut body.workers {
                if let Some(view) = worker["worker_identity"].as_str().and_then(|id| moved.view(id)) {
                    *worker = serde_json::to_value(view).map_err(internal)?;
                }
            }
            if let Some(token) = compare_to {
                body.heartbeat_comparison = Some(self.compare_with(token, &heartbeats)?);
            }
            let full = serde_json::to_vec(&body).map_err(internal)?;
            // A body too large for the text block needs the snapshot for its digest.
            if full.len() <= FULL_TEXT_LIMIT {
                self.remember(consistency_token, heartbeats);
                return self.answer_json(full, || serde_json::to_value(&body), || Ok(String::new()));
            }
        }
        // Kept for another page, or too large to answer without the snapshot: take it.
        let (number, taken) = fleet.numbered_json_snapshot(manifest, policy, at).map_err(unavailable)?;
        self.fresh_summary(number, &taken, page, own, compare_to)
    }

    /// The summary `page` of snapshot `number`, kept for the next summary of it.
    pub(super) fn fresh_summary(
        &self,
        number: u64,
        taken: &JsonSnapshot<'_>,
        page: SnapshotPage,
        own: Option<&str>,
        compare_to: Option<&str>,
    ) -> Result<CallToolResult, CallToolResult> {
        let snap = &taken.snapshot;
        let mut body = page.body(snap, own).map_err(internal)?;
        let heartbeats = LiveHeartbeats::of(snap);
        *self.summary.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(KeptSummary {
            number,
            page,
            body: body.clone(),
            heartbeats: heartbeats.clone(),
            follows: 0,
        });
        if let Some(token) = compare_to {
            body.heartbeat_comparison = Some(self.compare_with(token, &heartbeats)?);
        }
        self.remember(snap.consistency_token.clone(), heartbeats);
        self.answer(&body, || digest(snap))
    }

    /// Keeps `snap`'s live heartbeats under its token for a later `compare_to`.
    pub(super) fn remember(&self, token: String, beats: LiveHeartbeats) {
        let mut recent = self.recent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if recent.len() == RECENT_SNAPSHOTS {
            recent.pop_front();
        }
        recent.push_back((token, beats));
    }

    /// Seed 000's heartbeat comparison between the snapshot this server answered with
    /// `token` and `now`'s live heartbeats.
    pub(super) fn compare_with(&self, token: &str, now: &LiveHeartbeats) -> Result<Value, CallToolResult> {
        let recent = self.recent.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let earlier = recent.iter().find(|(t, _)| t == token).map(|(_, beats)| beats).ok_or_else(|| {
            invalid(
                "compare_to",
                format!(
                    "{token:?} is not the consistency_token of one of the last {RECENT_SNAPSHOTS} snapshots this \
                     server answered"
                ),
            )
        })?;
        serde_json::to_value(compare_heartbeats(earlier, now)).map_err(internal)
    }
}
