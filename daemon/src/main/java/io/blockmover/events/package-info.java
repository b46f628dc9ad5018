/**
 * The event stream of {@code blockmover events}, after {@code drbdsetup events2}: a snapshot of every object
 * (daemon, groups, volumes, peers, jobs) as {@code exists} lines, a marker {@code exists -}, then one line per
 * {@code create}, {@code change} or {@code destroy}. {@link io.blockmover.events.EventTable} turns successive
 * observations of the objects into events, {@link io.blockmover.events.EventBus} fans them out to subscribers,
 * {@link io.blockmover.events.EventFormat} prints them. Everything here runs on the conductor thread, except
 * {@code EventFormat}, which the CLI uses.
 */
package io.blockmover.events;
