package io.blockmover.conductor;

/**
 * Life of a copy job. Only the terminal states survive as they are; a job found in another state at start-up
 * resumes.
 */
public enum JobState
{
    /** Connecting to the peer and authenticating, or waiting to retry. */
    CONNECTING,
    /** A session runs: seeding, copying or verifying (see the phase). */
    RUNNING,
    /** The link or the peer went away; the job retries with back-off and resumes from its bitmap. */
    WAITING,
    COMPLETED,
    FAILED,
    CANCELLED;

    public boolean isTerminal()
    {
        return this == COMPLETED || this == FAILED || this == CANCELLED;
    }
}
