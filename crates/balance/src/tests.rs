use super::*;
use proptest::prelude::*;

fn specs(weights: &[u32]) -> Vec<ServerSpec> {
    weights
        .iter()
        .map(|&weight| ServerSpec {
            weight,
            backup: false,
        })
        .collect()
}

fn names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("10.0.0.{i}:8080")).collect()
}

fn counts(b: &mut Balancer, n: usize, picks: usize) -> Vec<usize> {
    let mut c = vec![0; n];
    for _ in 0..picks {
        c[b.pick(None, |_| true, &[]).unwrap()] += 1;
    }
    c
}

const ALL_POLICIES: [Policy; 4] = [
    Policy::RoundRobin,
    Policy::LeastConn,
    Policy::RandomTwo,
    Policy::Hash,
];

fn balancer(policy: Policy, servers: &[ServerSpec], seed: u64) -> Balancer {
    let maglev = (policy == Policy::Hash).then(|| {
        let w: Vec<u32> = servers.iter().map(|s| s.weight).collect();
        Arc::new(Maglev::new(&names(servers.len()), &w))
    });
    Balancer::new(policy, servers, maglev, seed)
}

// --- round robin ---

#[test]
fn nginx_smooth_wrr_sequence() {
    let mut b = Balancer::new(Policy::RoundRobin, &specs(&[5, 1, 1]), None, 0);
    let seq: String = (0..14)
        .map(|_| (b'a' + b.pick(None, |_| true, &[]).unwrap() as u8) as char)
        .collect();
    assert_eq!(seq, "aabacaaaabacaa");
}

#[test]
fn round_robin_equal_weights_cycles() {
    let mut b = Balancer::new(Policy::RoundRobin, &specs(&[1, 1, 1]), None, 0);
    let seq: Vec<usize> = (0..6)
        .map(|_| b.pick(None, |_| true, &[]).unwrap())
        .collect();
    assert_eq!(seq, [0, 1, 2, 0, 1, 2]);
}

#[test]
fn seed_shifts_the_round_robin_phase() {
    let mut a = Balancer::new(Policy::RoundRobin, &specs(&[5, 1, 1]), None, 0);
    let mut b = Balancer::new(Policy::RoundRobin, &specs(&[5, 1, 1]), None, 3);
    let sa: Vec<usize> = (0..10)
        .map(|_| a.pick(None, |_| true, &[]).unwrap())
        .collect();
    let sb: Vec<usize> = (0..7)
        .map(|_| b.pick(None, |_| true, &[]).unwrap())
        .collect();
    assert_eq!(sb, sa[3..]);
}

#[test]
fn round_robin_weight_proportions() {
    let w = [1, 2, 3, 10];
    let mut b = Balancer::new(Policy::RoundRobin, &specs(&w), None, 7);
    let c = counts(&mut b, 4, 16_000);
    assert_eq!(c, [1000, 2000, 3000, 10_000]);
}

#[test]
fn round_robin_skips_unusable_and_tried() {
    let mut b = Balancer::new(Policy::RoundRobin, &specs(&[1, 1, 1, 1]), None, 0);
    for _ in 0..20 {
        let i = b.pick(None, |i| i != 1, &[2]).unwrap();
        assert!(i == 0 || i == 3);
    }
    assert_eq!(b.pick(None, |i| i == 2, &[2]), None);
}

// --- least conn ---

#[test]
fn least_conn_prefers_idle_servers() {
    let mut b = Balancer::new(Policy::LeastConn, &specs(&[1, 1, 1]), None, 0);
    b.started(0);
    b.started(1);
    assert_eq!(b.pick(None, |_| true, &[]), Some(2));
    b.started(2);
    b.started(2);
    assert_eq!(b.active(2), 2);
    let i = b.pick(None, |_| true, &[]).unwrap();
    assert!(i == 0 || i == 1);
    // Unusable or tried idle servers do not count.
    b.finished(2);
    b.finished(2);
    assert_eq!(b.pick(None, |i| i != 2, &[]).map(|i| i < 2), Some(true));
    assert_eq!(b.pick(None, |_| true, &[2, 0]), Some(1));
}

#[test]
fn least_conn_relative_to_weight() {
    let mut b = Balancer::new(Policy::LeastConn, &specs(&[4, 1]), None, 0);
    for _ in 0..3 {
        b.started(0);
    }
    // 3/4 < 1/1 once server 1 has one request.
    b.started(1);
    assert_eq!(b.pick(None, |_| true, &[]), Some(0));
    b.started(0); // 4/4 == 1/1: a tie, broken by weighted round robin
    let c = counts(&mut b, 2, 500);
    assert_eq!(c, [400, 100]);
}

#[test]
fn least_conn_ties_round_robin() {
    let mut b = Balancer::new(Policy::LeastConn, &specs(&[1, 1, 1]), None, 0);
    let seq: Vec<usize> = (0..6)
        .map(|_| b.pick(None, |_| true, &[]).unwrap())
        .collect();
    assert_eq!(seq, [0, 1, 2, 0, 1, 2]);
}

/// Requests that finish at different speeds: least conn sends fewer to the
/// slow server.
#[test]
fn least_conn_tracks_load() {
    let mut b = Balancer::new(Policy::LeastConn, &specs(&[1, 1]), None, 0);
    let mut served = [0; 2];
    for step in 0..10_000 {
        let i = b.pick(None, |_| true, &[]).unwrap();
        b.started(i);
        served[i] += 1;
        // Server 0 finishes everything at once, server 1 one request every
        // fourth step.
        while b.active(0) > 0 {
            b.finished(0);
        }
        if step % 4 == 0 {
            b.finished(1);
        }
    }
    assert!(served[0] > served[1] * 2, "{served:?}");
}

// --- random two ---

#[test]
fn random_two_never_picks_the_busier() {
    // With two candidates both are always drawn, so the less loaded wins.
    let mut b = Balancer::new(Policy::RandomTwo, &specs(&[1, 1]), None, 1);
    b.started(1);
    for _ in 0..1000 {
        assert_eq!(b.pick(None, |_| true, &[]), Some(0));
    }
    // The busiest of three is never picked: it loses against either other.
    let mut b = Balancer::new(Policy::RandomTwo, &specs(&[1, 1, 1]), None, 2);
    for _ in 0..5 {
        b.started(2);
    }
    b.started(0);
    let c = counts(&mut b, 3, 3000);
    assert_eq!(c[2], 0);
    assert!(c[0] > 500 && c[1] > 1500, "{c:?}"); // 1 wins against 0; 0 only against 2
}

#[test]
fn random_two_distribution() {
    let mut b = Balancer::new(Policy::RandomTwo, &specs(&[1; 8]), None, 42);
    let c = counts(&mut b, 8, 80_000);
    for (i, &x) in c.iter().enumerate() {
        assert!(x.abs_diff(10_000) < 1000, "server {i}: {c:?}");
    }
    // Weighted draws when idle.
    let mut b = Balancer::new(Policy::RandomTwo, &specs(&[1, 3]), None, 42);
    let c = counts(&mut b, 2, 40_000);
    // a is drawn with probability 1/4, and wins idle ties.
    assert!(c[0].abs_diff(10_000) < 1000, "{c:?}");
}

#[test]
fn random_two_depends_on_seed_only() {
    let pick = |seed| {
        let mut b = Balancer::new(Policy::RandomTwo, &specs(&[1; 16]), None, seed);
        (0..50)
            .map(|_| b.pick(None, |_| true, &[]).unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!(pick(5), pick(5));
    assert_ne!(pick(5), pick(6));
}

#[test]
fn random_two_balances_under_load() {
    let mut b = Balancer::new(Policy::RandomTwo, &specs(&[1; 10]), None, 9);
    let mut inflight = std::collections::VecDeque::new();
    for _ in 0..20_000 {
        let i = b.pick(None, |_| true, &[]).unwrap();
        b.started(i);
        inflight.push_back(i);
        if inflight.len() > 100 {
            b.finished(inflight.pop_front().unwrap());
        }
        let max = (0..10).map(|i| b.active(i)).max().unwrap();
        assert!(max <= 20, "max in flight {max}"); // the mean is 10
    }
}

// --- hash ---

#[test]
fn hash_is_sticky_and_spreads() {
    let servers = specs(&[1; 5]);
    let mut b = balancer(Policy::Hash, &servers, 0);
    let mut c = [0usize; 5];
    for k in 0..10_000u32 {
        let key = format!("user-{k}");
        let i = b.pick(Some(key.as_bytes()), |_| true, &[]).unwrap();
        assert_eq!(b.pick(Some(key.as_bytes()), |_| true, &[]), Some(i));
        c[i] += 1;
    }
    for x in c {
        assert!(x.abs_diff(2000) < 200, "{c:?}");
    }
}

#[test]
fn hash_down_server_keys_move_others_stay() {
    let servers = specs(&[1; 5]);
    let mut b = balancer(Policy::Hash, &servers, 0);
    for k in 0..5_000u32 {
        let key = k.to_be_bytes();
        let home = b.pick(Some(&key), |_| true, &[]).unwrap();
        let down = b.pick(Some(&key), |i| i != 3, &[]).unwrap();
        assert_ne!(down, 3);
        if home != 3 {
            assert_eq!(down, home);
        }
        // A retry after `home` goes elsewhere, the same place a down `home`
        // would send it.
        let retry = b.pick(Some(&key), |_| true, &[home]).unwrap();
        assert_ne!(retry, home);
        assert_eq!(b.pick(Some(&key), |i| i != home, &[]), Some(retry));
    }
}

#[test]
fn hash_falls_back_to_round_robin() {
    let mut b = Balancer::new(Policy::Hash, &specs(&[5, 1, 1]), None, 0);
    let seq: Vec<usize> = (0..7)
        .map(|_| b.pick(Some(b"k"), |_| true, &[]).unwrap())
        .collect();
    assert_eq!(seq, [0, 0, 1, 0, 2, 0, 0]);
    let mut b = balancer(Policy::Hash, &specs(&[5, 1, 1]), 0);
    let seq: Vec<usize> = (0..7)
        .map(|_| b.pick(None, |_| true, &[]).unwrap())
        .collect();
    assert_eq!(seq, [0, 0, 1, 0, 2, 0, 0]);
}

#[test]
fn hash_table_larger_than_servers_is_harmless() {
    // A table built for more servers than the balancer has never yields an
    // index out of range.
    let table = Arc::new(Maglev::new(&names(10), &[]));
    let mut b = Balancer::new(Policy::Hash, &specs(&[1, 1]), Some(table), 0);
    for k in 0..2000u32 {
        let i = b.pick(Some(&k.to_le_bytes()), |_| true, &[]).unwrap();
        assert!(i < 2);
    }
}

// --- common ---

#[test]
fn backups_only_when_no_primary_qualifies() {
    let servers = vec![
        ServerSpec {
            weight: 1,
            backup: false,
        },
        ServerSpec {
            weight: 1,
            backup: true,
        },
        ServerSpec {
            weight: 1,
            backup: false,
        },
        ServerSpec {
            weight: 1,
            backup: true,
        },
    ];
    for policy in ALL_POLICIES {
        let mut b = balancer(policy, &servers, 3);
        for k in 0..200u32 {
            let key = k.to_le_bytes();
            let i = b.pick(Some(&key), |_| true, &[]).unwrap();
            assert!(i == 0 || i == 2, "{policy:?}");
            let i = b.pick(Some(&key), |i| i != 0, &[2]).unwrap();
            assert!(i == 1 || i == 3, "{policy:?}");
            assert_eq!(
                b.pick(Some(&key), |i| i != 3, &[0, 2]),
                Some(1),
                "{policy:?}"
            );
            assert_eq!(
                b.pick(Some(&key), |_| true, &[0, 1, 2, 3]),
                None,
                "{policy:?}"
            );
        }
        // Busy primaries still win over idle backups.
        b.started(0);
        b.started(2);
        let i = b.pick(None, |_| true, &[]).unwrap();
        assert!(i == 0 || i == 2, "{policy:?}");
    }
}

#[test]
fn empty_and_out_of_range() {
    for policy in ALL_POLICIES {
        let mut b = balancer(policy, &[], 0);
        assert_eq!(b.pick(Some(b"k"), |_| true, &[]), None);
        b.started(0);
        b.finished(5);
        assert_eq!(b.active(0), 0);
    }
    let mut b = Balancer::new(Policy::LeastConn, &specs(&[1]), None, 0);
    b.finished(0);
    assert_eq!(b.active(0), 0);
    b.started(0);
    assert_eq!(b.active(0), 1);
    assert_eq!(b.pick(None, |_| true, &[7, 9]), Some(0));
}

#[test]
fn zero_weights_count_as_one() {
    for policy in ALL_POLICIES {
        let mut b = balancer(policy, &specs(&[0, 0]), 0);
        let c = counts(&mut b, 2, 1000);
        assert!(c[0] > 300 && c[1] > 300, "{policy:?}: {c:?}");
    }
}

#[test]
fn huge_weights_do_not_overflow() {
    let big = [u32::MAX, u32::MAX, 1, u32::MAX];
    for policy in ALL_POLICIES {
        let mut b = balancer(policy, &specs(&big), u64::MAX);
        for _ in 0..1000 {
            let i = b.pick(Some(b"x"), |_| true, &[]).unwrap();
            b.started(i);
        }
    }
}

fn policy() -> impl Strategy<Value = Policy> {
    prop::sample::select(ALL_POLICIES.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// pick returns only usable, untried indices, a backup only when no
    /// primary qualifies, and None only when nothing qualifies.
    #[test]
    fn pick_respects_constraints(
        policy in policy(),
        servers in prop::collection::vec((0u32..6, any::<bool>()), 0..12),
        rounds in prop::collection::vec(
            (prop::collection::vec(any::<bool>(), 12), prop::collection::vec(0usize..14, 0..4), any::<Option<u16>>(), any::<Option<u8>>()),
            1..24,
        ),
        seed in any::<u64>(),
    ) {
        let specs: Vec<ServerSpec> = servers.iter().map(|&(weight, backup)| ServerSpec { weight, backup }).collect();
        let mut b = balancer(policy, &specs, seed);
        let n = specs.len();
        for (up, tried, key, done) in rounds {
            let usable = |i: usize| {
                assert!(i < n, "usable({i}) with {n} servers");
                up[i]
            };
            let key = key.map(|k| k.to_le_bytes());
            let qualifies = |i: usize, backup: bool| up[i] && !tried.contains(&i) && specs[i].backup == backup;
            let primary = (0..n).any(|i| qualifies(i, false));
            let backup = (0..n).any(|i| qualifies(i, true));
            match b.pick(key.as_ref().map(|k| &k[..]), usable, &tried) {
                Some(i) => {
                    prop_assert!(i < n);
                    prop_assert!(qualifies(i, false) || (!primary && qualifies(i, true)));
                    b.started(i);
                }
                None => prop_assert!(!primary && !backup),
            }
            if let Some(d) = done {
                b.finished(usize::from(d) % (n + 2));
            }
        }
    }

    /// Smooth WRR hands out exactly the weights over one cycle, in any phase.
    #[test]
    fn round_robin_exact_over_a_cycle(weights in prop::collection::vec(1u32..8, 1..8), seed in any::<u64>()) {
        let mut b = Balancer::new(Policy::RoundRobin, &specs(&weights), None, seed);
        let total: u32 = weights.iter().sum();
        let c = counts(&mut b, weights.len(), total as usize);
        let want: Vec<usize> = weights.iter().map(|&w| w as usize).collect();
        prop_assert_eq!(c, want);
    }

    /// Maglev with random names: every slot is owned, the table only holds
    /// valid indices, and lookup_usable agrees with lookup when all are up.
    #[test]
    fn maglev_lookups(n in 1usize..20, weights in prop::collection::vec(0u32..5, 0..20), hashes in prop::collection::vec(any::<u64>(), 1..50), down in any::<u32>()) {
        let m = Maglev::new(&names(n), &weights);
        for h in hashes {
            let owner = m.lookup(h);
            prop_assert!(owner < n);
            prop_assert_eq!(m.lookup_usable(h, |_| true), Some(owner));
            let up = |i: usize| down & (1 << i) == 0;
            let got = m.lookup_usable(h, up);
            prop_assert_eq!(got.is_some(), (0..n).any(up));
            if up(owner) {
                prop_assert_eq!(got, Some(owner));
            }
            if let Some(g) = got {
                prop_assert!(up(g));
            }
        }
    }
}

#[test]
fn set_weight_changes_the_shares_from_the_next_pick() {
    let mut b = Balancer::new(Policy::RoundRobin, &specs(&[1, 1]), None, 0);
    assert_eq!(counts(&mut b, 2, 100), vec![50, 50]);
    b.set_weight(0, 3);
    assert_eq!(b.weight(0), Some(3));
    assert_eq!(counts(&mut b, 2, 400), vec![300, 100]);
    b.set_weight(1, 0);
    assert_eq!(b.weight(1), Some(1), "0 counts as 1");
    b.set_weight(7, 5);
    assert_eq!(b.weight(7), None);
}
