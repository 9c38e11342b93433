-- +goose Up
-- The full-text index also holds each entry's tenant and session, so a search
-- narrowed to one intersects their terms with the query's inside the index
-- instead of walking every match of a common word.
DROP TRIGGER history_entries_text_insert;
DROP TRIGGER history_entries_text_delete;
DROP TABLE history_text;
CREATE VIRTUAL TABLE history_text USING fts5(
    text, tenant, session_id,
    content = 'history_entries', content_rowid = 'pk', tokenize = 'porter unicode61'
);
INSERT INTO history_text (rowid, text, tenant, session_id)
    SELECT pk, text, tenant, session_id FROM history_entries WHERE text != '';
-- +goose StatementBegin
CREATE TRIGGER history_entries_text_insert AFTER INSERT ON history_entries WHEN new.text != '' BEGIN
    INSERT INTO history_text (rowid, text, tenant, session_id) VALUES (new.pk, new.text, new.tenant, new.session_id);
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER history_entries_text_delete AFTER DELETE ON history_entries WHEN old.text != '' BEGIN
    INSERT INTO history_text (history_text, rowid, text, tenant, session_id)
        VALUES ('delete', old.pk, old.text, old.tenant, old.session_id);
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER history_entries_text_insert;
DROP TRIGGER history_entries_text_delete;
DROP TABLE history_text;
CREATE VIRTUAL TABLE history_text USING fts5(
    text, content = 'history_entries', content_rowid = 'pk', tokenize = 'porter unicode61'
);
INSERT INTO history_text (rowid, text) SELECT pk, text FROM history_entries WHERE text != '';
-- +goose StatementBegin
CREATE TRIGGER history_entries_text_insert AFTER INSERT ON history_entries WHEN new.text != '' BEGIN
    INSERT INTO history_text (rowid, text) VALUES (new.pk, new.text);
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER history_entries_text_delete AFTER DELETE ON history_entries WHEN old.text != '' BEGIN
    INSERT INTO history_text (history_text, rowid, text) VALUES ('delete', old.pk, old.text);
END;
-- +goose StatementEnd
