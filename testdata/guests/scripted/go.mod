module github.com/wasmkeep/alarms/testdata/guests/scripted

go 1.26

require github.com/wasmkeep/alarms/guest-sdk v0.0.0

replace github.com/wasmkeep/alarms/guest-sdk => ../../../guest-sdk
