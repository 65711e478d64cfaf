//! The cases. Each is a small async fn whose doc line states the contract;
//! they live by topic in the modules below, and [`CASES`] lists them all in
//! the order they were added to the suite.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use lock_core::Capabilities;

use crate::{Case, Harness};

mod election;
mod faults;
mod fencing;
mod force_release;
mod helpers;
mod input;
mod inspect;
mod keepalive;
mod multi;
mod mutex;
mod rw;
mod semaphore;
mod waiting;

macro_rules! cases {
    ($( $topic:ident :: $name:ident if $applies:expr ),* $(,)?) => {
        /// Every case of the suite, in order.
        pub static CASES: &[Case] = &[
            $( Case {
                name: stringify!($name),
                applies: $applies,
                run: |h: Arc<dyn Harness>| -> BoxFuture<'static, ()> { $topic::$name(h).boxed() },
            } ),*
        ];
    };
}

fn always(_: &Capabilities) -> bool {
    true
}

cases! {
    mutex::mutual_exclusion_under_contention if always,
    mutex::try_acquire_on_held_lock_returns_none_quickly if always,
    mutex::acquire_times_out_when_held if always,
    mutex::release_frees_at_once if always,
    mutex::dropped_guard_releases_in_background if always,
    mutex::stale_guard_release_never_frees_next_holder if always,
    mutex::abandoned_guard_frees_within_ttl if always,
    fencing::fencing_tokens_strictly_increase if |c| c.fencing.has_tokens(),
    fencing::no_fencing_token_when_backend_has_none if |c| !c.fencing.has_tokens(),
    keepalive::extend_keeps_lock_past_first_ttl if always,
    keepalive::keep_alive_holds_lock_for_three_ttls if always,
    keepalive::guard_reports_state_and_validity if always,
    keepalive::loss_signal_fires_when_lock_removed if always,
    keepalive::with_lock_stops_section_when_lock_lost if always,
    mutex::with_lock_runs_and_releases if always,
    waiting::dropped_waiting_acquire_leaves_nothing if always,
    mutex::different_names_do_not_interfere if always,
    waiting::waiters_are_served_in_fifo_order if |c| c.fifo,
    waiting::release_wakes_a_waiter_promptly if |c| c.notified_wait,
    input::bad_input_is_invalid_argument if always,
    faults::unreachable_server_is_unavailable_quickly if |c| c.remote,
    inspect::inspect_reports_holder if always,
    inspect::inspect_and_list_describe_the_holder if |c| c.describes_holder,
    mutex::model_based_random_interleavings if always,
    mutex::parent_and_child_names_are_independent if always,
    faults::every_call_honours_its_deadline_when_the_server_hangs if |c| c.remote,
    faults::lost_release_notification_still_wakes_the_waiter if |c| c.remote && c.notified_wait,
    faults::a_waiter_rides_out_servers_coming_back_one_at_a_time if |c| c.remote && c.notified_wait,
    faults::unanswered_extend_never_lengthens_validity if |c| c.remote,
    multi::acquire_all_takes_all_or_nothing if always,
    multi::crossing_multi_locks_never_deadlock_or_overlap if always,
    multi::multi_lock_reports_a_lost_member if always,
    multi::acquire_all_never_returns_a_lost_member if always,
    rw::readers_hold_together_and_a_writer_alone if |c| c.read_write,
    rw::waiting_writer_is_not_starved_by_new_readers if |c| c.read_write,
    rw::read_write_exclusion_under_contention if |c| c.read_write,
    fencing::write_tokens_follow_every_earlier_grant if |c| c.read_write && c.fencing.has_tokens(),
    rw::downgrade_keeps_writers_out_and_lets_readers_in if |c| c.read_write,
    rw::upgrade_is_refused if |c| c.read_write,
    rw::dropped_read_write_waiters_leave_nothing if |c| c.read_write,
    semaphore::permits_never_exceed_the_count if |c| c.semaphore,
    semaphore::freed_permit_goes_to_a_waiter_promptly if |c| c.semaphore && c.notified_wait,
    semaphore::abandoned_permit_frees_within_ttl if |c| c.semaphore,
    semaphore::dropped_permit_waiter_leaves_nothing if |c| c.semaphore,
    input::missing_primitives_are_unsupported
        if |c| !c.read_write || !c.semaphore || !c.election,
    inspect::list_shows_held_locks_by_prefix if always,
    rw::downgrade_keeps_a_queued_writer_out if |c| c.read_write,
    faults::list_and_other_primitives_honour_their_deadline_when_the_server_hangs if |c| c.remote,
    rw::a_returning_writer_queues_behind_waiting_readers if |c| c.read_write,
    waiting::a_releaser_coming_back_queues_behind_the_waiter if |c| c.fifo,
    waiting::a_wait_that_times_out_has_left_the_line_when_it_returns if always,
    faults::a_waiter_cut_off_holds_nobody_up_long_after_its_deadline if |c| c.remote,
    faults::a_forever_waiter_rides_out_an_outage if |c| c.remote,
    fencing::a_reader_queued_behind_a_writer_gets_a_newer_token
        if |c| c.read_write && c.fencing.has_tokens(),
    fencing::a_writer_queued_behind_a_downgrade_gets_a_newer_token
        if |c| c.read_write && c.fencing.has_tokens(),
    fencing::readers_let_in_together_get_distinct_newer_tokens
        if |c| c.read_write && c.fencing.has_tokens(),
    fencing::queued_permits_get_tokens_in_grant_order if |c| c.semaphore && c.fencing.has_tokens(),
    force_release::force_release_hands_the_mutex_to_the_waiter if always,
    force_release::force_release_removes_every_reader_and_permit if |c| c.read_write || c.semaphore,
    faults::an_unanswered_downgrade_never_leaves_the_write_guard_held_beside_a_reader
        if |c| c.remote && c.read_write,
    election::one_leader_at_a_time_with_rising_epochs if |c| c.election,
    election::followers_see_the_leader_and_its_values if |c| c.election,
    election::resignation_hands_over_in_campaign_order if |c| c.election && c.fifo,
    election::an_abandoned_term_ends_within_its_ttl if |c| c.election,
    election::withdrawn_candidates_leave_nothing if |c| c.election,
    election::lock_delay_follows_only_an_unresigned_end if |c| c.election,
    election::with_leadership_runs_while_leading if |c| c.election,
    election::bad_campaigns_are_invalid_argument if |c| c.election,
}
