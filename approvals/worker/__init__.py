"""The delivery worker: its loop, the delivery of one outbox message and the review digests."""
