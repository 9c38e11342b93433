-- +goose Up
-- Most entries belong to no run and have no text: partial indexes leave them
-- out (a GIN index would otherwise hold a placeholder per empty row), which
-- keeps appends fast.
DROP INDEX history_entries_run_sequence;
CREATE INDEX history_entries_run_sequence ON history_entries (run_id, sequence) WHERE run_id != '';
DROP INDEX history_entries_text_tsv;
CREATE INDEX history_entries_text_tsv ON history_entries USING gin (text_tsv) WHERE text != '';

-- +goose Down
DROP INDEX history_entries_text_tsv;
CREATE INDEX history_entries_text_tsv ON history_entries USING gin (text_tsv);
DROP INDEX history_entries_run_sequence;
CREATE INDEX history_entries_run_sequence ON history_entries (run_id, sequence);
