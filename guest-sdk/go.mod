module github.com/wasmkeep/alarms/guest-sdk

go 1.26
