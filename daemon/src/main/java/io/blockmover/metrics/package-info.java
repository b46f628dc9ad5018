/**
 * Metrics of groups in the counters file, and their export in the Prometheus text format: per-group counters the
 * conductor updates once a second ({@link io.blockmover.metrics.GroupCounters}), a writer of the exposition
 * format that reads only the counters file ({@link io.blockmover.metrics.PrometheusWriter}), and the optional
 * loopback HTTP endpoint that serves it ({@link io.blockmover.metrics.MetricsHttpServer}).
 */
package io.blockmover.metrics;
