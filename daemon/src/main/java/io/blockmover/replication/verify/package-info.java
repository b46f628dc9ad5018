/**
 * Online verify of a replication group: region checksums (CRC32C per sub-block) compared on both sides while
 * writes flow. Checksums taken at different moments on the two sides would be meaningless under load, so the
 * comparison travels inside the group's ordered stream: the source fences a region against writes, reads it,
 * and logs a VERIFY record carrying its digests (no data) at an LSN after every write the region holds; the
 * destination's applier, reaching that LSN (every earlier record applied, no later one yet), digests its own copy
 * and sends the result back in a VERIFY_RESULT frame. {@link io.blockmover.replication.verify.VerifyRecord} is the
 * payload layout, {@link io.blockmover.replication.verify.SourceVerifier} the source's job,
 * {@link io.blockmover.replication.verify.DestinationVerifier} the destination's side.
 */
package io.blockmover.replication.verify;
