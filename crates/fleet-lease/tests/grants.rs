//! One test per grant denial case of seed 002, and the policy default.

use fleet_identity::Timestamp;
use fleet_lease::{
    ConnectorIdentity, ConnectorPolicy, DenyAll, FencingEpoch, GrantDenial, GrantIssuer, GrantLimits,
    LeaseId, LeaseKind, LeaseRecord, PolicyDecision, Tenure, decide_acquire, decide_release, decide_takeover,
    normalize_scopes,
};
use time::Duration;

struct AllowAll;

impl ConnectorPolicy for AllowAll {
    fn authorize_lease(
        &self,
        _: &ConnectorIdentity,
        _: &str,
        _: &[String],
        _: Option<Duration>,
    ) -> PolicyDecision {
        PolicyDecision::Allow
    }
    fn authorize_grant(
        &self,
        _: &ConnectorIdentity,
        _: &str,
        _: &[String],
        _: Option<Duration>,
    ) -> PolicyDecision {
        PolicyDecision::Allow
    }
}

fn at(s: i64) -> Timestamp {
    Timestamp::from_unix_millis(1_785_412_800_000 + s * 1000).unwrap()
}

fn who() -> ConnectorIdentity {
    ConnectorIdentity::new("acme", "agent-7", "slack-main").unwrap()
}

fn scopes(s: &[&str]) -> Vec<String> {
    normalize_scopes(s).unwrap()
}

fn lease() -> LeaseRecord {
    let tenure = Tenure {
        owner: "connector-a".into(),
        lease_id: LeaseId::new("lease-1").unwrap(),
        ttl: Duration::seconds(60),
        scopes: scopes(&["chat.read", "chat.write"]),
        process: None,
    };
    decide_acquire(None, &who().lease_key(), LeaseKind::Connector, &tenure, at(0)).unwrap().1
}

fn issuer() -> GrantIssuer {
    GrantIssuer::new([7; 32], GrantLimits::default())
}

fn grant_at(issuer: &GrantIssuer, lease: &LeaseRecord, now: Timestamp) -> fleet_lease::Grant {
    issuer
        .issue(
            &who(),
            "connector-a",
            Some(lease),
            &scopes(&["chat.read"]),
            Duration::seconds(30),
            now,
            &AllowAll,
        )
        .unwrap()
}

fn check(
    lease: Option<&LeaseRecord>,
    context: &ConnectorIdentity,
    want: &[&str],
    now: Timestamp,
) -> Result<(), GrantDenial> {
    let issuer = issuer();
    let grant = grant_at(&issuer, &self::lease(), at(1));
    issuer.validate(&grant, context, lease, &scopes(want), now)
}

#[test]
fn a_valid_grant_validates() {
    assert_eq!(check(Some(&lease()), &who(), &["chat.read"], at(2)), Ok(()));
}

#[test]
fn a_grant_from_another_process_or_a_restart_is_refused() {
    let before_restart = GrantIssuer::new([1; 32], GrantLimits::default());
    let grant = grant_at(&before_restart, &lease(), at(1));
    let after_restart = GrantIssuer::new([2; 32], GrantLimits::default());
    assert_eq!(
        after_restart.validate(&grant, &who(), Some(&lease()), &scopes(&["chat.read"]), at(2)),
        Err(GrantDenial::NotMintedHere)
    );
}

#[test]
fn a_forged_grant_is_refused() {
    let issuer = issuer();
    let grant = grant_at(&issuer, &lease(), at(1));
    let forged = grant.forged_with_scopes(scopes(&["chat.read", "chat.write"]));
    assert_eq!(
        issuer.validate(&forged, &who(), Some(&lease()), &scopes(&["chat.write"]), at(2)),
        Err(GrantDenial::NotMintedHere)
    );
}

#[test]
fn an_expired_grant_is_refused() {
    assert_eq!(check(Some(&lease()), &who(), &["chat.read"], at(31)), Err(GrantDenial::GrantExpired));
}

#[test]
fn an_expired_lease_is_refused() {
    let mut short = lease();
    short.expires_at = at(5);
    assert_eq!(check(Some(&short), &who(), &["chat.read"], at(6)), Err(GrantDenial::LeaseExpired));
}

#[test]
fn a_released_lease_is_refused() {
    let l = lease();
    let released = decide_release(Some(&l), &l.holder(), at(2)).unwrap();
    assert_eq!(check(Some(&released), &who(), &["chat.read"], at(3)), Err(GrantDenial::LeaseReleased));
}

#[test]
fn a_stale_epoch_after_takeover_is_refused() {
    let l = lease();
    let mut lapsed = l.clone();
    lapsed.expires_at = at(2);
    let tenure = Tenure {
        owner: "connector-a".into(),
        lease_id: LeaseId::new("lease-2").unwrap(),
        ttl: Duration::seconds(60),
        scopes: l.scopes.clone(),
        process: None,
    };
    let taken = decide_takeover(Some(&lapsed), FencingEpoch::FIRST, &tenure, at(3)).unwrap();
    assert_eq!(check(Some(&taken), &who(), &["chat.read"], at(4)), Err(GrantDenial::StaleEpoch));
}

#[test]
fn a_replaced_connector_or_lease_id_is_refused() {
    let mut other = lease();
    other.owner = "connector-b".into();
    assert_eq!(check(Some(&other), &who(), &["chat.read"], at(2)), Err(GrantDenial::LeaseReplaced));
    let mut rotated = lease();
    rotated.lease_id = LeaseId::new("lease-9").unwrap();
    assert_eq!(check(Some(&rotated), &who(), &["chat.read"], at(2)), Err(GrantDenial::LeaseReplaced));
}

#[test]
fn a_missing_lease_is_refused() {
    assert_eq!(check(None, &who(), &["chat.read"], at(2)), Err(GrantDenial::LeaseMissing));
}

#[test]
fn cross_tenant_agent_and_binding_grants_are_refused() {
    let l = lease();
    let cases = [
        (ConnectorIdentity::new("other", "agent-7", "slack-main").unwrap(), GrantDenial::CrossTenant),
        (ConnectorIdentity::new("acme", "agent-8", "slack-main").unwrap(), GrantDenial::CrossAgent),
        (ConnectorIdentity::new("acme", "agent-7", "slack-alt").unwrap(), GrantDenial::CrossBinding),
    ];
    for (context, denial) in cases {
        assert_eq!(check(Some(&l), &context, &["chat.read"], at(2)), Err(denial));
    }
}

#[test]
fn scopes_must_be_in_both_grant_and_lease() {
    // Granted chat.read only: chat.write is in the lease but not the grant.
    assert_eq!(check(Some(&lease()), &who(), &["chat.write"], at(2)), Err(GrantDenial::ScopeNotAuthorized));
    // The lease narrowed since the grant: chat.read is in the grant but no longer the lease.
    let mut narrowed = lease();
    narrowed.scopes = scopes(&["chat.write"]);
    assert_eq!(check(Some(&narrowed), &who(), &["chat.read"], at(2)), Err(GrantDenial::ScopeNotAuthorized));
}

#[test]
fn issuing_respects_caps_and_policy() {
    let issuer = issuer();
    let l = lease();
    let too_long = issuer.issue(
        &who(),
        "connector-a",
        Some(&l),
        &scopes(&["chat.read"]),
        Duration::seconds(31),
        at(1),
        &AllowAll,
    );
    assert_eq!(too_long.unwrap_err(), GrantDenial::TtlExceedsCap);
    let denied = issuer.issue(
        &who(),
        "connector-a",
        Some(&l),
        &scopes(&["chat.read"]),
        Duration::seconds(5),
        at(1),
        &DenyAll,
    );
    assert_eq!(denied.unwrap_err(), GrantDenial::PolicyDenied);
    let tight =
        GrantIssuer::new([7; 32], GrantLimits::tightened(Duration::minutes(10), Duration::seconds(5)));
    assert_eq!(tight.limits().max_lease_ttl(), Duration::minutes(5), "a cap can only be tightened");
    let over = tight.issue(
        &who(),
        "connector-a",
        Some(&l),
        &scopes(&["chat.read"]),
        Duration::seconds(6),
        at(1),
        &AllowAll,
    );
    assert_eq!(over.unwrap_err(), GrantDenial::TtlExceedsCap);
}

#[test]
fn the_default_policy_denies_everything() {
    let s = scopes(&["chat.read"]);
    assert_eq!(DenyAll.authorize_lease(&who(), "c", &s, Some(Duration::seconds(1))), PolicyDecision::Deny);
    assert_eq!(DenyAll.authorize_grant(&who(), "c", &s, None), PolicyDecision::Deny);
}

#[test]
fn scopes_are_normalized() {
    assert_eq!(
        normalize_scopes(&[" Chat.Write", "chat.read", "chat.write"]).unwrap(),
        vec!["chat.read", "chat.write"]
    );
    assert!(normalize_scopes(&["  "]).is_err());
}
