//! The Lua step against a real redis-server: atomic under concurrency (no
//! window ever holds more than the limit), cool-downs, learnt quotas, the
//! adaptive rate, the retry budget, and a restart's NOSCRIPT.

use std::time::{Duration, Instant};

use polite_core::pace::PaceLimit;
use polite_lab::redis::Redis;
use polite_redis::Step;

fn redis() -> Option<(Redis, redis::Client)> {
    let binary = Redis::find_or_skip()?;
    let server = Redis::start(&binary);
    let client = redis::Client::open(server.url()).unwrap();
    Some((server, client))
}

/// Most grants in any window of `window` µs among sorted instants.
fn busiest_window(stamps: &[u64], window: u64) -> usize {
    let mut most = 0;
    let mut start = 0;
    for end in 0..stamps.len() {
        while stamps[end] - stamps[start] >= window {
            start += 1;
        }
        most = most.max(end + 1 - start);
    }
    most
}

#[test]
fn concurrent_steps_never_exceed_the_limit_in_any_window() {
    let Some((_server, client)) = redis() else {
        return;
    };
    const LIMIT: u32 = 7;
    let window = Duration::from_millis(200);
    let run_for = Duration::from_millis(1500);
    let threads: Vec<_> = (0..8u32)
        .map(|i| {
            let client = client.clone();
            std::thread::spawn(move || {
                let mut conn = client.get_connection().unwrap();
                let started = Instant::now();
                let mut stamps = Vec::new();
                let mut asks = 0;
                // Bounded in count and in time.
                while started.elapsed() < run_for && asks < 20_000 {
                    asks += 1;
                    let step = Step {
                        want: 1 + (asks + i) % 3,
                        limit: LIMIT,
                        window,
                        ttl: Duration::from_secs(60),
                        ..Step::default()
                    };
                    let r = step.invoke(&mut conn, "test:{concurrent}").unwrap();
                    if r.granted.len() < step.want as usize {
                        assert!(r.next_us > r.server_us, "{r:?}");
                        assert!(matches!(
                            r.refused_by,
                            PaceLimit::Window { limit: LIMIT, .. }
                        ));
                    }
                    stamps.extend(r.granted.iter().map(|_| r.server_us));
                }
                stamps
            })
        })
        .collect();
    let mut stamps: Vec<u64> = threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect();
    stamps.sort_unstable();
    let most = busiest_window(&stamps, 200_000);
    assert!(most <= LIMIT as usize, "{most} grants in one window");
    // Not vacuous: the limit was reached, about once per window.
    let windows = run_for.as_micros() as usize / 200_000;
    assert_eq!(most, LIMIT as usize);
    assert!(
        stamps.len() >= (windows - 1) * LIMIT as usize,
        "{} grants",
        stamps.len()
    );
    assert!(
        stamps.len() <= (windows + 1) * LIMIT as usize,
        "{} grants",
        stamps.len()
    );
}

/// A grant at `t` ages out at exactly `t + window`, as the local
/// `RateThrottle`'s do, so a refusal never names `now` as the next slot.
/// The log is seeded with one grant per microsecond for 10 ms, so a step
/// while they age out lands exactly on a boundary; it is a partial grant
/// (it wants more than the seeds). A round whose steps all missed those
/// 10 ms (a busy machine) is run again, with a fresh key, up to 5 times.
#[test]
fn a_refusal_always_names_a_later_instant_even_on_the_boundary() {
    let Some((_server, client)) = redis() else {
        return;
    };
    let mut conn = client.get_connection().unwrap();
    const SEEDED: u64 = 10_000;
    const WANT: u32 = 20_000;
    let window = Duration::from_secs(1);
    let server_now = |conn: &mut redis::Connection| {
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query(conn).unwrap();
        secs * 1_000_000 + micros
    };
    let mut on_boundary = 0;
    for round in 0..5 {
        let key = format!("test:{{boundary{round}}}");
        // They age out one per µs from 300 ms after t0, for 10 ms.
        let t0 = server_now(&mut conn);
        let first = t0 + 300_000 - 1_000_000;
        let members: Vec<(u64, String)> = (0..SEEDED)
            .map(|i| (first + i, format!("seed:{i}")))
            .collect();
        redis::cmd("ZADD")
            .arg(format!("{key}:log"))
            .arg(
                members
                    .iter()
                    .flat_map(|(s, m)| [s.to_string(), m.clone()])
                    .collect::<Vec<_>>(),
            )
            .exec(&mut conn)
            .unwrap();
        let ageing = first + 1_000_000..first + 1_000_000 + SEEDED;
        let seeded_at = server_now(&mut conn);
        // Waiting for the server's clock, not checking a delay: until 2 ms
        // before they age out.
        if let Some(wait) = (ageing.start - 2_000).checked_sub(seeded_at) {
            std::thread::sleep(Duration::from_micros(wait));
        }
        let step = Step {
            want: WANT,
            limit: SEEDED as u32,
            window,
            ttl: Duration::from_secs(60),
            ..Step::default()
        };
        let started = Instant::now();
        // Bounded in time: until they have aged out.
        while started.elapsed() < Duration::from_secs(2) {
            let r = step.invoke(&mut conn, &key).unwrap();
            if r.granted.len() < WANT as usize {
                assert!(r.next_us > r.server_us, "{:?}", (r.server_us, r.next_us));
                on_boundary += usize::from(ageing.contains(&r.server_us) && !r.granted.is_empty());
            }
            if r.server_us >= ageing.end {
                break;
            }
        }
        if on_boundary > 0 {
            break;
        }
    }
    assert!(
        on_boundary > 0,
        "no step landed while the seeds aged out, in 5 rounds"
    );
}

#[test]
fn returned_permits_free_their_slots_and_leases_hold_longer() {
    let Some((_server, client)) = redis() else {
        return;
    };
    let mut conn = client.get_connection().unwrap();
    let base = Step {
        want: 3,
        limit: 3,
        window: Duration::from_secs(10),
        hold_extra: Duration::from_secs(1),
        ttl: Duration::from_secs(60),
        ..Step::default()
    };
    let r = base.invoke(&mut conn, "test:{lease}").unwrap();
    assert_eq!(r.granted.len(), 3);
    let full = base.invoke(&mut conn, "test:{lease}").unwrap();
    assert!(full.granted.is_empty());
    // The first grant frees after window + hold_extra, on the server's clock.
    assert_eq!(full.next_us, r.server_us + 11_000_000);
    let back = Step {
        want: 2,
        returned: r.granted[..2].to_vec(),
        ..base.clone()
    };
    let again = back.invoke(&mut conn, "test:{lease}").unwrap();
    assert_eq!(again.granted.len(), 2, "two returned slots are free again");
}

#[test]
fn a_refusal_names_the_instant_the_wanted_permits_are_free_within_gather() {
    let Some((_server, client)) = redis() else {
        return;
    };
    let mut conn = client.get_connection().unwrap();
    let key = "test:{gather}";
    let base = Step {
        want: 1,
        limit: 3,
        window: Duration::from_secs(10),
        hold_extra: Duration::from_secs(1),
        ttl: Duration::from_secs(60),
        ..Step::default()
    };
    // Three grants a little apart, as a burst's: their slots free apart too.
    let mut at = Vec::new();
    for _ in 0..3 {
        let r = base.invoke(&mut conn, key).unwrap();
        assert_eq!(r.granted.len(), 1);
        at.push(r.server_us);
        std::thread::sleep(Duration::from_millis(5));
    }
    let hold = 11_000_000;
    let refused = |step: Step, conn: &mut redis::Connection| {
        let r = step.invoke(conn, key).unwrap();
        assert!(r.granted.is_empty(), "{r:?}");
        r.next_us
    };
    // One wanted, or no gathering: the first slot, as before.
    assert_eq!(refused(base.clone(), &mut conn), at[0] + hold);
    let three = Step {
        want: 3,
        ..base.clone()
    };
    assert_eq!(refused(three.clone(), &mut conn), at[0] + hold);
    // Three wanted, gathered: the instant all three are free...
    let gathered = Step {
        gather: Duration::from_secs(1),
        ..three.clone()
    };
    assert_eq!(refused(gathered.clone(), &mut conn), at[2] + hold);
    // ... but never more than `gather` after the first slot.
    let short = Step {
        gather: Duration::from_micros(at[1] - at[0]),
        ..three
    };
    assert_eq!(refused(short, &mut conn), at[1] + hold);
    // The process's demand counts as wanted for the instant named.
    let demand = Step {
        want: 1,
        demand: 3,
        ..gathered
    };
    assert_eq!(refused(demand, &mut conn), at[2] + hold);
}

#[test]
fn cool_downs_learnt_quotas_adaptive_rate_and_budget_are_shared() {
    let Some((server, client)) = redis() else {
        return;
    };
    let mut a = client.get_connection().unwrap();
    let mut b = client.get_connection().unwrap();
    let key = "test:{shared}";
    let plain = Step {
        want: 1,
        learn_max: 1000,
        adaptive: true,
        budget_cap: 500,
        ttl: Duration::from_secs(60),
        ..Step::default()
    };
    let r = plain.invoke(&mut a, key).unwrap();
    assert_eq!((r.granted.len(), r.budget_tokens), (1, Some(500)));
    // A cool-down from process a holds process b.
    let until = r.server_us + 5_000_000;
    Step {
        want: 0,
        cool_until_us: until,
        budget_delta: 14,
        ..plain.clone()
    }
    .invoke(&mut a, key)
    .unwrap();
    let held = plain.invoke(&mut b, key).unwrap();
    assert_eq!(
        (held.granted.len(), held.next_us, held.refused_by),
        (0, until, PaceLimit::CoolDown)
    );
    assert_eq!(held.budget_tokens, Some(486), "a's withdrawal is b's too");
    // A shorter cool-down never shortens it.
    let shorter = Step {
        cool_until_us: until - 4_000_000,
        ..plain.clone()
    };
    assert_eq!(shorter.invoke(&mut b, key).unwrap().next_us, until);

    // A learnt quota (on a fresh key) binds every process, capped by learn_max.
    let key = "test:{learnt}";
    Step {
        want: 0,
        learnt: Some((2, Duration::from_secs(30))),
        ..plain.clone()
    }
    .invoke(&mut a, key)
    .unwrap();
    let two = Step {
        want: 3,
        ..plain.clone()
    };
    let r = two.invoke(&mut b, key).unwrap();
    assert_eq!(r.granted.len(), 2);
    assert_eq!(
        r.refused_by,
        PaceLimit::Window {
            limit: 2,
            window: Duration::from_secs(30),
            learned: true
        }
    );
    let capped = Step {
        learn_max: 1,
        ..two.clone()
    };
    assert!(
        capped
            .invoke(&mut a, "test:{learnt2}")
            .unwrap()
            .granted
            .len()
            == 3
    );

    // A bare 429 turns the fleet's adaptive rate on: one grant per interval.
    let key = "test:{adaptive}";
    let r = Step {
        want: 1,
        throttled: 1,
        throttled_sent_us: u64::MAX,
        ..plain.clone()
    }
    .invoke(&mut a, key)
    .unwrap();
    assert_eq!(r.granted.len(), 1);
    let next = Step {
        want: 1,
        ..plain.clone()
    }
    .invoke(&mut b, key)
    .unwrap();
    assert!(next.granted.is_empty());
    let PaceLimit::Adaptive { interval } = next.refused_by else {
        panic!("{next:?}");
    };
    assert_eq!(interval, Duration::from_secs(2), "the 0.5/s floor");
    assert_eq!(next.next_us, r.server_us + 2_000_000);

    // A restart flushes the script cache: EVALSHA's NOSCRIPT falls back to EVAL.
    assert_eq!(server.command(&["SCRIPT", "FLUSH"]), "+OK");
    assert_eq!(
        plain.invoke(&mut a, "test:{fresh}").unwrap().granted.len(),
        1
    );
    // Idle keys expire.
    let ttl = server.command(&["PTTL", "test:{fresh}:st"]);
    let ms: i64 = ttl.trim_start_matches(':').parse().unwrap();
    assert!((1..=60_000).contains(&ms), "{ttl}");
}

#[test]
fn sends_made_while_redis_did_not_answer_seed_the_log_and_a_lost_log_gets_the_grants_too() {
    let Some((mut server, client)) = redis() else {
        return;
    };
    let mut conn = client.get_connection().unwrap();
    let key = "test:{seed}";
    let base = Step {
        want: 2,
        limit: 5,
        window: Duration::from_secs(10),
        ttl: Duration::from_secs(60),
        ..Step::default()
    };
    let first = base.invoke(&mut conn, key).unwrap();
    assert_eq!(first.granted.len(), 2);
    assert!(first.epoch > 0);
    let epoch = first.epoch;
    let t = first.server_us;
    // Two local sends (Redis "paused"): counted, with the two grants the
    // log already holds (not counted twice): one slot left of five.
    let back = Step {
        want: 5,
        epoch,
        seed_local: vec![t + 1, t + 2],
        seed_granted: vec![t, t],
        ..base.clone()
    };
    let r = back.invoke(&mut conn, key).unwrap();
    assert_eq!((r.granted.len(), r.epoch), (1, epoch));

    // Restarted empty: an ask that seeds nothing sees a new epoch (and its
    // returned ids, of the old log, free nothing).
    server.restart();
    let mut conn = client.get_connection().unwrap();
    let unaware = Step {
        want: 0,
        epoch,
        returned: vec![1, 2],
        ..base.clone()
    };
    let r = unaware.invoke(&mut conn, key).unwrap();
    assert_ne!(r.epoch, epoch, "a lost key has a new epoch");
    // The seeding step (with the old epoch) counts the local sends and the
    // grants: 2 + 3 of 5, nothing left.
    let seeded = Step {
        want: 1,
        epoch,
        seed_local: vec![t + 1, t + 2],
        seed_granted: vec![t, t, t + 3],
        ..base.clone()
    };
    let r2 = seeded.invoke(&mut conn, key).unwrap();
    assert_eq!(r2.granted.len(), 0, "{r2:?}");
    assert_eq!(r2.epoch, r.epoch);
    // Seeding again with the current epoch counts only local sends.
    let fresh = Step {
        want: 1,
        epoch: r.epoch,
        seed_granted: vec![t; 5],
        limit: 6,
        ..base
    };
    assert_eq!(fresh.invoke(&mut conn, key).unwrap().granted.len(), 1);
}
