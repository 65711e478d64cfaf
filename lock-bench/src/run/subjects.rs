//! The subjects of one backend group: the uncontended levels in rounds
//! taken in turn, the same levels again under `--load`, and the contended
//! runs.

use std::sync::Arc;

use indicatif::ProgressBar;

use super::groups::Plan;
use super::{slug, Profile};
use crate::backend::Backend;
use crate::load::BusyLoad;
use crate::report::SubjectReport;
use crate::subject::{Kind, Locker};
use crate::workload::{self, ContendedParams, CycleSamples, Uncontended, UncontendedParams};

/// The subjects measured again under `--load`: ours and the raw protocol,
/// where the group has both (their ratio is what the load may not move).
pub(super) fn loaded_subjects(plans: &[Plan]) -> Vec<usize> {
    let has = |kind| plans.iter().any(|p| p.kind == kind);
    if !(has(Kind::Ours) && has(Kind::Raw)) {
        return Vec::new();
    }
    plans
        .iter()
        .enumerate()
        .filter(|(_, p)| matches!(p.kind, Kind::Ours | Kind::Raw))
        .map(|(i, _)| i)
        .collect()
}

/// One pass over the uncontended levels of a backend group.
#[derive(Clone, Copy)]
struct Levels<'a> {
    backend: Backend,
    profile: &'a Profile,
    run_id: &'a str,
    bar: &'a ProgressBar,
    /// Added to the lock names (a pass under load uses names of its own).
    tag: &'a str,
}

impl Levels<'_> {
    /// Every level for the subjects `which` of `plans`, in rounds in which
    /// they take turns; a subject that fails gets its error in `reports`
    /// and no further turns. Returns each measured subject's levels.
    async fn run(
        &self,
        plans: &[Plan],
        which: &[usize],
        reports: &mut [SubjectReport],
    ) -> Vec<(usize, Vec<Uncontended>)> {
        let profile = self.profile;
        let mut out: Vec<(usize, Vec<Uncontended>)> =
            which.iter().map(|&i| (i, Vec::new())).collect();
        let slice = profile.uncontended / profile.rounds.max(1);
        for &tasks in &profile.levels {
            let params = |plan: &Plan, warmup: usize| UncontendedParams {
                tasks,
                tasks_per_client: profile.tasks_per_client,
                duration: slice,
                warmup,
                prefix: format!("{}/{}/u{tasks}{}", self.run_id, slug(&plan.label), self.tag),
            };
            // One pool of clients per subject for all the rounds of this level.
            let mut pools: Vec<Option<Vec<Arc<dyn Locker>>>> = Vec::new();
            for &i in which {
                let plan = &plans[i];
                let pool = match (&plan.connector, &reports[i].error) {
                    (Ok(conn), None) => {
                        self.bar.set_message(format!(
                            "{}: {} connecting x{tasks}",
                            self.backend, plan.label
                        ));
                        match workload::uncontended_pool(conn.as_ref(), &params(plan, 0)).await {
                            Ok(pool) => Some(pool),
                            Err(e) => {
                                reports[i].error = Some(e);
                                None
                            }
                        }
                    }
                    _ => None,
                };
                pools.push(pool);
            }
            let mut samples: Vec<CycleSamples> =
                which.iter().map(|_| CycleSamples::default()).collect();
            for round in 0..profile.warmup_rounds + profile.rounds.max(1) {
                let measured = round >= profile.warmup_rounds;
                for (k, &i) in which.iter().enumerate() {
                    self.bar.inc(1);
                    let plan = &plans[i];
                    let (Some(pool), None) = (&pools[k], &reports[i].error) else {
                        continue;
                    };
                    let what = match (measured, self.tag.is_empty()) {
                        (false, _) => "warming up",
                        (true, true) => "uncontended",
                        (true, false) => "uncontended under load",
                    };
                    self.bar
                        .set_message(format!("{}: {} {what} x{tasks}", self.backend, plan.label));
                    let warmup = if round == 0 { profile.warmup } else { 0 };
                    match workload::uncontended(pool, &params(plan, warmup)).await {
                        Ok(s) if measured => samples[k].merge(s),
                        Ok(_) => {}
                        Err(e) => reports[i].error = Some(e),
                    }
                }
            }
            drop(pools);
            for ((i, levels), s) in out.iter_mut().zip(samples) {
                if reports[*i].error.is_none() {
                    levels.push(s.finish());
                }
            }
        }
        out
    }
}

/// Measures the subjects of one backend: the uncontended levels in rounds
/// (the subjects taking turns); with `--load`, the levels of ours and the
/// raw protocol again while the busy processes run; then each contended run.
pub(super) async fn measure_group(
    backend: Backend,
    plans: Vec<Plan>,
    profile: Profile,
    run_id: String,
    bar: ProgressBar,
) -> Vec<SubjectReport> {
    let mut reports: Vec<SubjectReport> = plans
        .iter()
        .map(|p| {
            let mut r = SubjectReport::new(p.label.clone(), p.kind);
            r.error = p.connector.as_ref().err().cloned();
            r
        })
        .collect();
    let every: Vec<usize> = (0..plans.len()).collect();
    let quiet = Levels {
        backend,
        profile: &profile,
        run_id: &run_id,
        bar: &bar,
        tag: "",
    };
    for (i, measured) in quiet.run(&plans, &every, &mut reports).await {
        reports[i].uncontended = measured;
    }
    let compared = loaded_subjects(&plans);
    if profile.load > 0 && !compared.is_empty() {
        bar.set_message(format!(
            "{backend}: starting {} busy processes",
            profile.load
        ));
        match BusyLoad::start(profile.load) {
            Ok(load) => {
                let loaded = Levels {
                    tag: "-loaded",
                    ..quiet
                };
                for (i, measured) in loaded.run(&plans, &compared, &mut reports).await {
                    reports[i].loaded = measured;
                }
                drop(load);
            }
            Err(e) => {
                for &i in &compared {
                    reports[i].load_error = Some(e.clone());
                }
            }
        }
    }
    for (i, plan) in plans.iter().enumerate() {
        if !plan.contended {
            continue;
        }
        bar.inc(1);
        let (Ok(conn), None) = (&plan.connector, &reports[i].error) else {
            continue;
        };
        bar.set_message(format!(
            "{}: {} contended x{}",
            backend, plan.label, profile.contenders
        ));
        let p = ContendedParams {
            contenders: profile.contenders,
            duration: profile.contended,
            wait: profile.wait,
            name: format!("{run_id}/{}/contended", slug(&plan.label)),
        };
        match workload::contended(conn.clone(), &p).await {
            Ok(c) => reports[i].contended = Some(c),
            Err(e) => reports[i].error = Some(e),
        }
    }
    reports
}
