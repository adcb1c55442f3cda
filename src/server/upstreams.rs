//! The upstream set: one provider slot per `--upstream` (each prefixed as its
//! `--upstream-prefix` decides next to the built-in sets and the other upstreams), built at
//! start and again on SIGHUP (`Reloader`), when the `--config` file's `[[upstream]]` tables or
//! their per-upstream keys changed. A reload is all or nothing: a set that does not resolve,
//! validate or name its tools apart is refused whole and the running set stays; otherwise the
//! new set goes to every core's reload inbox (`runtime::reload` applies it there), counted
//! `tidemark_upstream_reloads_total{outcome}`.
//!
//! Owns: the upstreams' fingerprints (what makes two slots the same upstream) and their
//! metrics indexes (a name keeps its index for the process's life). Never: touches a core's
//! providers (the cores do, each on its own thread).

use std::rc::Rc;
use std::sync::Arc;

use crate::config::{BuiltinSet, Config, ConfigError, UpstreamAuth};
use crate::metrics::CoreMetrics;
use crate::provider::Provider;
use crate::runtime::reload::{ProviderSlot, ReloadInbox};
use crate::runtime::ProviderFactory;
use crate::upstream::{Bridge, ProcessCount};

/// Why an upstream set cannot be built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SetError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// `--upstream-credentials` (or a filter, policy or era the validation let through).
    #[error("{0}")]
    Credentials(String),
    /// Two providers offer one name that no `--upstream-prefix` separates.
    #[error("{0}")]
    NameCollision(String),
}

/// One upstream of a set: its provider slot and the label the banner shows.
pub(crate) struct Upstream {
    pub(crate) label: String,
    pub(crate) slot: ProviderSlot,
}

/// The metrics index of each upstream name the process has served: a reload appends new
/// names and reuses known ones, so a series never changes its upstream.
#[derive(Clone, Default)]
pub(crate) struct MetricNames(Vec<String>);

impl MetricNames {
    fn index_of(&mut self, name: &str) -> usize {
        match self.0.iter().position(|known| known == name) {
            Some(index) => index,
            None => {
                self.0.push(name.to_owned());
                self.0.len() - 1
            }
        }
    }

    pub(crate) fn names(&self) -> Vec<String> {
        self.0.clone()
    }
}

/// The upstream set of `cfg` (after the embedding program's providers and the `builtin` sets).
pub(crate) fn build(
    cfg: &Config,
    builtin: &[BuiltinSet],
    count: &Arc<ProcessCount>,
    metric_names: &mut MetricNames,
) -> Result<Vec<Upstream>, SetError> {
    let names: Vec<&str> =
        cfg.upstream.specs.iter().filter_map(|spec| spec.name.as_deref()).collect();
    let auths = cfg.upstream_auths()?;
    let exchanging: Vec<&str> = (cfg.upstream.specs.iter().zip(&auths))
        .filter(|(_, auth)| **auth == UpstreamAuth::Exchange)
        .filter_map(|(spec, _)| spec.name.as_deref())
        .collect();
    let tuning = crate::upstream::ExchangeTuning {
        margin: cfg.upstream.exchange_margin,
        cache_entries: cfg.upstream.exchange_cache_entries,
        timeout: cfg.upstream.exchange_timeout,
        answer_bytes: cfg.upstream.exchange_answer_bytes,
    };
    let credentials = crate::upstream::CredentialTable::load(
        cfg.upstream.credentials.as_deref(),
        &names,
        &cfg.upstream.forward_authorization,
        (&exchanging, tuning),
    )
    .map_err(|e: crate::upstream::CredentialsError| SetError::Credentials(e.to_string()))?;
    if !exchanging.is_empty() {
        crate::upstream::start_exchanges(tuning.timeout, cfg.upstream.exchange_queue_entries)
            .map_err(SetError::Credentials)?;
    }
    // Checked by `Config::validate`; an error here is a Config built without it.
    let filters: Vec<_> = cfg
        .upstream_filters()
        .map_err(|e| SetError::Credentials(e.to_string()))?
        .into_iter()
        .map(|f| Arc::new(f.with_resource_globs(crate::uri::canonical_glob)))
        .collect();
    let policies = cfg.upstream_policies()?;
    let protocols = cfg.upstream_protocols()?;
    let settings = Arc::new(crate::upstream::Settings {
        env: cfg.upstream.env.clone(),
        isolation: cfg.upstream.isolation,
        max_processes: cfg.upstream.processes_max,
        timeout: cfg.upstream.timeout,
        call_max: cfg.upstream.call_max,
        start_timeout: cfg.upstream.start_timeout,
        line_bytes: cfg.upstream.line_bytes,
        catalog_bytes: cfg.upstream.catalog_bytes_per_core,
        queue_bytes: cfg.upstream.queue_bytes,
        kill_grace: cfg.upstream.kill_grace,
        credentials,
        filters: filters.clone(),
        policies: policies.clone(),
        protocols: protocols.clone(),
        breaker_failures: cfg.upstream.breaker_failures,
        input_rounds_max: cfg.upstream.input_rounds_max,
        breaker_pause: cfg.upstream.breaker_pause,
        resource_uri_bytes_max: cfg.upstream.resource_uri_bytes_max,
    });
    let prefixes = cfg.upstream_prefixes().map_err(ConfigError::from)?;
    let prefixed = crate::upstream::probe::plan(&cfg.upstream.specs, &prefixes, builtin, &settings)
        .map_err(|e: Box<crate::upstream::Collision>| SetError::NameCollision(e.to_string()))?;
    let mut set = Vec::with_capacity(cfg.upstream.specs.len());
    for (index, spec) in cfg.upstream.specs.iter().enumerate() {
        let prefixed = prefixed[index];
        let metrics_name = spec.label(index);
        let slot = metric_names.index_of(&metrics_name);
        // Everything the provider is built from: the same text is the same upstream.
        let fingerprint = format!(
            "{metrics_name}\u{0}{spec:?}\u{0}{prefixed}\u{0}{:?}\u{0}{:?}\u{0}{:?}\u{0}{:?}\u{0}{slot}",
            filters.get(index),
            policies.get(index),
            protocols.get(index),
            auths.get(index),
        );
        let label = match &spec.name {
            Some(name) => format!("upstream:{name}"),
            None => "upstream".to_owned(),
        };
        let (spec, settings, count) = (spec.clone(), settings.clone(), count.clone());
        let factory: ProviderFactory = Arc::new(move || {
            let bridge =
                Bridge::new_rc(&spec, index, slot, prefixed, settings.clone(), count.clone());
            bridge as Rc<dyn Provider>
        });
        let slot = ProviderSlot { factory, fingerprint: Some(Arc::from(fingerprint)) };
        set.push(Upstream { label, slot });
    }
    Ok(set)
}

/// What a SIGHUP did to the upstream set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Applied,
    Refused,
    Unchanged,
}

/// The signal thread's side of upstream reloads: the set running now, and where a new one goes.
pub(crate) struct Reloader {
    /// The running configuration (its upstream set the one last applied).
    cfg: Config,
    builtin: Vec<BuiltinSet>,
    count: Arc<ProcessCount>,
    metric_names: MetricNames,
    /// The running set's fingerprints, in order.
    fingerprints: Vec<Arc<str>>,
    inboxes: Vec<Arc<ReloadInbox>>,
    metrics: Vec<Arc<CoreMetrics>>,
}

impl Reloader {
    pub(crate) fn new(
        cfg: Config,
        builtin: Vec<BuiltinSet>,
        count: Arc<ProcessCount>,
        metric_names: MetricNames,
        running: &[Upstream],
        inboxes: Vec<Arc<ReloadInbox>>,
        metrics: Vec<Arc<CoreMetrics>>,
    ) -> Reloader {
        let fingerprints = running.iter().filter_map(|u| u.slot.fingerprint.clone()).collect();
        Reloader { cfg, builtin, count, metric_names, fingerprints, inboxes, metrics }
    }

    /// Resolves the configuration again over the `--config` file as it is now and applies its
    /// upstream set when it differs from the running one (logged, and counted on core 0).
    pub(crate) fn reload(&mut self) -> Outcome {
        let outcome = match self.try_reload() {
            Ok(outcome) => outcome,
            Err(why) => {
                tracing::warn!(error = %why, "SIGHUP: upstream set refused; the running set stays");
                Outcome::Refused
            }
        };
        if let Some(core) = self.metrics.first() {
            match outcome {
                Outcome::Applied => core.upstream_reloads_applied.inc(),
                Outcome::Refused => core.upstream_reloads_refused.inc(),
                Outcome::Unchanged => core.upstream_reloads_unchanged.inc(),
            }
        }
        outcome
    }

    fn try_reload(&mut self) -> Result<Outcome, String> {
        let Some(origin) = &self.cfg.config_file else { return Ok(Outcome::Unchanged) };
        let read = crate::cli::reresolve(origin)?;
        let next = self.cfg.with_upstream_set_of(&read);
        next.validate().map_err(|e| e.to_string())?;
        let mut metric_names = self.metric_names.clone();
        let set = build(&next, &self.builtin, &self.count, &mut metric_names)
            .map_err(|e| e.to_string())?;
        let fingerprints: Vec<Arc<str>> =
            set.iter().filter_map(|u| u.slot.fingerprint.clone()).collect();
        if fingerprints == self.fingerprints {
            tracing::info!("SIGHUP: upstream set unchanged");
            return Ok(Outcome::Unchanged);
        }
        let kept = fingerprints.iter().filter(|f| self.fingerprints.contains(f)).count();
        let labels: Vec<&str> = set.iter().map(|u| u.label.as_str()).collect();
        tracing::info!(
            upstreams = %labels.join(","),
            kept,
            new_or_changed = fingerprints.len() - kept,
            removed = self.fingerprints.len() - kept,
            "SIGHUP: upstream set applied"
        );
        for core in &self.metrics {
            core.hist.name_upstreams(metric_names.names());
        }
        let slots: Arc<Vec<ProviderSlot>> = Arc::new(set.into_iter().map(|u| u.slot).collect());
        for inbox in &self.inboxes {
            inbox.send(slots.clone());
        }
        self.metric_names = metric_names;
        self.fingerprints = fingerprints;
        self.cfg = next;
        Ok(Outcome::Applied)
    }
}
