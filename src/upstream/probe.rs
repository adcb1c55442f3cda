//! The start-up probe of upstream names: when a `--upstream-prefix` decision needs an
//! upstream's names (an upstream that is `never` or `on-collision` next to another provider),
//! `plan` starts each upstream once on the calling thread (a runtime of its own, with the client
//! capabilities of a core's shared link), lists its tools and prompts (filtered, unprefixed),
//! and stops it again before the workers start; `names::decide` decides from them. Upstream
//! connections are otherwise made at a client's `initialize`, so this is the only way to know
//! them at start-up. An upstream that cannot be probed (down, too slow: each step is bounded by
//! `--upstream-start-timeout-secs`) is not checked: an `on-collision` one is then prefixed
//! (its names must not depend on a later listing), and its names meet the rule of every tool
//! table (`dispatch`: a later colliding tool is hidden, logged once and counted).
//!
//! Called by: `server` (start-up), before the bridges are made. Never: runs on a worker, or
//! keeps a probe's upstream running past the start.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{BuiltinSet, PrefixPolicy, UpstreamSpec};
use crate::provider::builtin::BuiltinProvider;
use crate::provider::{Notifier, Provider, SessionRef, SessionStart, Value};

use super::names::{decide, Collision, Names, Offer, Source};
use super::{Bridge, ProcessCount, Settings};

/// Whether each `--upstream` is prefixed, decided as `decide` does; the upstreams are probed
/// only when some decision needs their names: another provider is there and some upstream is
/// not `always` (prefixed upstreams cannot collide with each other: their names are distinct).
pub(crate) fn plan(
    specs: &[UpstreamSpec],
    policies: &[PrefixPolicy],
    builtin: &[BuiltinSet],
    settings: &Arc<Settings>,
) -> Result<Vec<bool>, Box<Collision>> {
    let always = |p: &PrefixPolicy| *p == PrefixPolicy::Always;
    if specs.len() + builtin.len() < 2 || policies.iter().all(always) {
        return Ok(policies.iter().map(always).collect());
    }
    let (builtin_names, upstream_names) = probe(specs, builtin, settings);
    let mut offers: Vec<Offer> = (builtin.iter().zip(builtin_names))
        .map(|(set, names)| Offer {
            source: Source::Builtin(set.name()),
            policy: None,
            names: Some(names),
        })
        .collect();
    let upstreams = specs.iter().zip(policies).zip(upstream_names).enumerate();
    for (index, ((spec, policy), names)) in upstreams {
        let source = Source::Upstream(spec.name.clone(), spec.label(index));
        offers.push(Offer { source, policy: Some(*policy), names });
    }
    let prefixed = decide(&offers)?;
    let upstreams = prefixed[builtin.len()..].to_vec();
    let plans = specs.iter().zip(policies.iter().zip(&upstreams)).enumerate();
    for (index, (spec, (policy, prefixed))) in plans {
        if *policy == PrefixPolicy::OnCollision {
            let upstream = spec.label(index);
            tracing::info!(%upstream, prefixed, "--upstream-prefix on-collision");
        }
    }
    Ok(upstreams)
}

/// The built-in sets' names and each upstream's (`None`: not probed), each upstream started
/// once on this thread and stopped again.
fn probe(
    specs: &[UpstreamSpec],
    builtin: &[BuiltinSet],
    settings: &Arc<Settings>,
) -> (Vec<Names>, Vec<Option<Names>>) {
    let built = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new().enable_timer().build();
    let mut rt = match built {
        Ok(rt) => rt,
        Err(e) => {
            tracing::warn!(error = %e, "no runtime to probe the upstreams' names at start-up");
            return (vec![Names::default(); builtin.len()], vec![None; specs.len()]);
        }
    };
    let count = Arc::new(ProcessCount::default());
    let names = rt.block_on(async {
        let mut sets = Vec::with_capacity(builtin.len());
        for set in builtin {
            sets.push(names_of(&BuiltinProvider::new(*set), SessionRef::NONE).await);
        }
        let handles: Vec<_> = (specs.iter().enumerate())
            .map(|(index, spec)| {
                let bridge = Bridge::new(spec, index, false, settings.clone(), count.clone());
                monoio::spawn(probe_one(bridge, spec.label(index)))
            })
            .collect();
        let mut upstreams = Vec::with_capacity(handles.len());
        for handle in handles {
            upstreams.push(handle.await);
        }
        super::deletes_settled().await;
        (sets, upstreams)
    });
    // The probe's children exit before the workers start theirs (`--upstream-max-processes`
    // counts only the workers' children).
    let until = Instant::now() + settings.kill_grace + Duration::from_secs(1);
    while count.live() > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    names
}

/// One upstream's names through a connection of its own, made and stopped here.
async fn probe_one(bridge: Bridge, label: String) -> Option<Names> {
    let start = SessionStart {
        session: SessionRef::STATELESS,
        protocol_version: crate::wire::LEGACY_VERSIONS[0],
        client_params: Value::Null,
        notifier: Notifier::detached(),
        caller: None,
    };
    let opened = bridge.open_session(&start).await;
    let names = match opened {
        Ok(_) => Some(names_of(&bridge, SessionRef::STATELESS).await),
        Err(e) => {
            tracing::warn!(
                upstream = %label,
                error = %e,
                "upstream not reachable at start-up: its names are checked when it lists them"
            );
            None
        }
    };
    bridge.stop();
    names
}

async fn names_of(provider: &dyn Provider, session: SessionRef) -> Names {
    let tools = provider.list_tools().await.unwrap_or_default();
    let prompts = provider.list_prompts(session).await.unwrap_or_default();
    Names {
        tools: tools.into_iter().map(|t| t.name).collect(),
        prompts: (prompts.iter())
            .filter_map(|p| p.get("name").and_then(Value::as_str).map(str::to_owned))
            .collect(),
    }
}
