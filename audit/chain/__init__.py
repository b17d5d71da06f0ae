"""The chain: events accepted inside the transaction of the change they record (`accept`), sealed in
commit order by the sequencer (`sequencer`, woken by `wakeup`, run by the worker's `sequencer_thread`,
its lost queue rows put back by `lost_pending`), signed at checkpoints kept in the database and in
files (`checkpoints`, `checkpoint_files`), read back page by page (`records`) and verified where it is
stored (`verification`). `event_data` holds what an event's data may not contain."""
