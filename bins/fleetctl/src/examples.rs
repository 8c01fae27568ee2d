//! An example for every subcommand's help (and so its manual page), by command path.

/// `(path, lines)`: each line an example command, with what it does after two spaces.
pub(crate) const EXAMPLES: &[(&str, &str)] = &[
    (
        "registry init",
        "fleetctl registry init\nFLEET_REGISTRY='postgres://fleet@db/fleet?sslmode=verify-full' fleetctl registry init --json",
    ),
    ("registry export", "fleetctl registry export > backup.json    a whole backup: rows, leases, audit log"),
    (
        "registry import",
        "fleetctl --registry restored.sqlite3 registry import backup.json\nfleetctl registry import - --json < rows.json",
    ),
    ("registry sweep", "fleetctl registry sweep --json    mark rows whose heartbeat lapsed as stale"),
    ("registry prune", "fleetctl registry prune --before 2026-01-01T00:00:00Z --export pruned.json"),
    (
        "registry upgrade",
        "fleetctl registry upgrade --dry-run    the steps an upgrade takes; nothing changes",
    ),
    (
        "registry replication",
        "fleetctl registry replication --policy synchronous    every grant confirmed by a synchronous standby",
    ),
    (
        "registry accept-history",
        "fleetctl registry accept-history --reason 'db-a lost in failover; old holders stopped'",
    ),
    (
        "worker run",
        "fleetctl worker run --namespace author -- my-worker --serve\nfleet-launch run --client codex -- fleetctl worker run --namespace reviewer -- ./review.sh",
    ),
    (
        "worker list",
        "fleetctl worker list --namespace reconciler\nfleetctl worker list --json | jq '.[] | select(.status == \"active\")'\nfleetctl worker list --live -w    redrawn every 2 s until Ctrl-C",
    ),
    (
        "snapshot",
        "fleetctl snapshot --gate    exit 1 unless the fleet is safe to mutate\nfleetctl snapshot --json > before.json; fleetctl snapshot --compare before.json\nfleetctl snapshot --manifest fleet.json --watch",
    ),
    (
        "host list",
        "fleetctl host list\nfleetctl host list -o wide    boots, first sign of life, leases and fences",
    ),
    (
        "host fence",
        "fleetctl host fence 0f3c…e2 --reason 'VM deleted by the autoscaler'    then: fleetctl retire plan",
    ),
    ("host unfence", "fleetctl host unfence 0f3c…e2    the host was reinstalled: its new boot may register"),
    ("retire plan", "fleetctl retire plan --json > plan.json"),
    (
        "retire apply",
        "fleetctl retire apply --registry-fingerprint b3:… --candidate-fingerprint b3:… --workers wkr-author-…\nfleetctl retire apply … --require-registry-match --remote prgs --json",
    ),
    (
        "lease acquire",
        "fleetctl lease acquire --key workflow:deploy --owner ops --ttl 300\nfleetctl lease acquire --key connector:acme/agent/slack --owner conn-1 --scope chat.read --policy policy.json",
    ),
    (
        "lease renew",
        "fleetctl lease renew --key workflow:deploy --owner ops --lease-id lease-… --epoch 3 --ttl 300",
    ),
    (
        "lease keep-alive",
        "fleetctl lease keep-alive --key workflow:deploy --owner ops --lease-id lease-… --epoch 3    Ctrl-C releases it",
    ),
    (
        "lease release",
        "fleetctl lease release --key workflow:deploy --owner ops --lease-id lease-… --epoch 3",
    ),
    ("lease takeover", "fleetctl lease takeover --key workflow:deploy --owner ops-2 --expected-epoch 3"),
    (
        "lease show",
        "fleetctl lease show --key init:schema    an initialization's status and version\nfleetctl lease show --json\nfleetctl lease show -w -o json | jq -c .    one listing per change",
    ),
    ("lease audit", "fleetctl lease audit --key workflow:deploy --json"),
    (
        "initialize",
        "fleetctl initialize --key schema --target-version 4 -- ./migrate.sh    runs once per version, fleet-wide",
    ),
    (
        "connector run",
        "fleetctl connector run --key connector:acme/agent/slack --owner conn-1 --scope chat.read --policy policy.json -- ./bridge",
    ),
    ("demo", "fleetctl demo    a guided tour on a throw-away registry\nfleetctl demo --keep /tmp/tour"),
    ("metrics", "fleetctl metrics | grep fleet_live_fleet_safe"),
    (
        "serve",
        "fleetctl serve    http://127.0.0.1:9464/metrics and /healthz\nfleetctl serve --listen 0.0.0.0:9464    exposes fleet metadata to the network",
    ),
    ("completions", "fleetctl completions bash > ~/.local/share/bash-completion/completions/fleetctl"),
    ("man", "fleetctl man --dir ~/.local/share/man/man1"),
];

#[cfg(test)]
mod tests {
    use clap::CommandFactory as _;

    #[test]
    fn every_subcommand_has_an_example() {
        let cmd = crate::Cli::command();
        for path in fleet_cli::manuals::leaf_paths(&cmd) {
            assert!(super::EXAMPLES.iter().any(|(p, _)| *p == path), "no example for `fleetctl {path}`");
        }
        let decorated = fleet_cli::manuals::with_examples(cmd, super::EXAMPLES);
        let mut help = Vec::new();
        let mut retire =
            decorated.find_subcommand("retire").unwrap().find_subcommand("apply").unwrap().clone();
        retire.write_long_help(&mut help).unwrap();
        assert!(String::from_utf8(help).unwrap().contains("Examples:\n  fleetctl retire apply"));
    }
}
