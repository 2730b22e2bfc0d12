package engine

import "fmt"

// KVRow is one row of the guest's table as SQLite holds it.
type KVRow struct {
	Key, Value []byte
	KeyType    string // SQLite's typeof(key): "blob" for every key a guest wrote
}

// KVRows reads the guest's whole table, for tests that compare it with a
// model.
func (s *Store) KVRows() ([]KVRow, error) {
	st, _, err := s.conn.Prepare(`SELECT key, value, typeof(key) FROM kv ORDER BY key`)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var rows []KVRow
	for st.Step() {
		rows = append(rows, KVRow{Key: st.ColumnBlob(0, nil), Value: st.ColumnBlob(1, nil), KeyType: st.ColumnText(2)})
	}
	if err := st.Err(); err != nil {
		return nil, fmt.Errorf("read kv: %w", err)
	}
	return rows, nil
}
