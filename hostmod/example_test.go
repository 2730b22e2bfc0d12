package hostmod_test

import (
	"bytes"
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ncruces/go-sqlite3"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/wasmkeep/alarms/abi"
	"github.com/wasmkeep/alarms/hostmod"
)

// The recipe of docs/embedding.md ("Add durable alarms to your wazero
// host") in one function: a plain wazero runtime with the alarm functions
// in it, a guest checked against the ABI, its _initialize run as the
// engine runs it (outside any event, so set-alarm answers EPERM there), an
// event that sets the alarm in the host's own SQLite database, and the
// alarm delivered through the host's own instance. The guest is
// testdata/recipe.wat.
func Example() {
	ctx := context.Background()
	wasm, err := os.ReadFile(filepath.Join("testdata", "recipe.wasm"))
	if err != nil {
		log.Fatal(err)
	}

	// 1. A runtime that stops a guest at its deadline, with wasmkeep:alarm.
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCloseOnContextDone(true))
	defer rt.Close(ctx)
	if err := hostmod.InstantiateAlarms(ctx, rt); err != nil {
		log.Fatal(err)
	}

	// 2. The class, checked once, and an instance of it for the actor:
	// GuestConfig runs _initialize, with no event in its context.
	class, err := rt.CompileModule(ctx, wasm)
	if err != nil {
		log.Fatal(err)
	}
	if err := hostmod.CheckGuest(class); err != nil {
		log.Fatal(err) // no on-alarm, or one of another signature
	}
	inst, err := rt.InstantiateModule(ctx, class, hostmod.GuestConfig(nil, nil))
	if err != nil {
		log.Fatal(err)
	}
	errno, err := inst.ExportedFunction("init-errno").Call(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("set-alarm from _initialize:", abi.ErrnoName(abi.Errno(errno[0])))

	// 3. The actor's database, the host's own, with the alarm's table.
	dir, err := os.MkdirTemp("", "recipe")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	conn, err := sqlite3.Open(filepath.Join(dir, "actor.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	tbl, err := hostmod.NewTable(conn)
	if err != nil {
		log.Fatal(err)
	}
	defer tbl.Close()
	id := abi.ActorID{Tenant: "t", Class: "recipe", Name: "a"}

	// An event: the guest sets its alarm in the event's transaction, which
	// End commits (or rolls back, on an error).
	ev, err := tbl.Begin(ctx, id)
	if err != nil {
		log.Fatal(err)
	}
	res, err := inst.ExportedFunction("schedule").Call(hostmod.WithEvent(ctx, ev), api.EncodeI64(time.Now().UnixMilli()))
	if err == nil && uint32(res[0]) != 0 {
		err = fmt.Errorf("schedule: errno %d", uint32(res[0]))
	}
	if err := ev.End(err); err != nil {
		log.Fatal(err)
	}
	fmt.Println("the event set the alarm:", ev.Result().AlarmChanged)

	// 4. The alarm is due: on-alarm runs on the host's instance, in a
	// transaction of its own, with the committed backoff should it fail.
	d, err := tbl.DeliverAlarm(ctx, id, inst.ExportedFunction(abi.ExportOnAlarm).Call, hostmod.DeliverOptions{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("delivered:", d.Ran, "failed:", d.Err != nil, "alarm left:", d.Alarm)
	// Output:
	// set-alarm from _initialize: EPERM
	// the event set the alarm: true
	// delivered: true failed: false alarm left: <nil>
}

// The Example's guest is what recipe.wat compiles to (checked where
// wat2wasm is installed; CI requires it).
func TestRecipeIsItsWat(t *testing.T) {
	wat2wasm, err := exec.LookPath("wat2wasm")
	if err != nil {
		if os.Getenv("WASMKEEP_REQUIRE_WAT2WASM") != "" {
			t.Fatal("wat2wasm not installed and WASMKEEP_REQUIRE_WAT2WASM is set (install wabt)")
		}
		t.Skip("wat2wasm not installed")
	}
	out := filepath.Join(t.TempDir(), "recipe.wasm")
	if b, err := exec.Command(wat2wasm, "-o", out, filepath.Join("testdata", "recipe.wat")).CombinedOutput(); err != nil {
		t.Fatalf("wat2wasm: %v\n%s", err, b)
	}
	want, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("testdata", "recipe.wasm"))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("testdata/recipe.wasm is not what recipe.wat compiles to (%v): run make testdata", err)
	}
}
