-- +goose Up
-- Most entries belong to no run and refer to no blob: partial indexes leave
-- them out, which keeps appends fast.
DROP INDEX history_entries_run_sequence;
CREATE INDEX history_entries_run_sequence ON history_entries (run_id, sequence) WHERE run_id != '';
DROP INDEX history_entries_blob_hash;
CREATE INDEX history_entries_blob_hash ON history_entries (blob_hash) WHERE blob_hash != '';

-- +goose Down
DROP INDEX history_entries_blob_hash;
CREATE INDEX history_entries_blob_hash ON history_entries (blob_hash);
DROP INDEX history_entries_run_sequence;
CREATE INDEX history_entries_run_sequence ON history_entries (run_id, sequence);
