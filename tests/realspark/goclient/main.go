// A small spark-connect-go client for the real-Spark tier: it runs SQL
// through a Spark Connect address and prints one JSON line per statement
// ({"sql", "rows", "first", "error", "secs"}), so the Python scenarios can
// assert on results. Exit status 1 when any statement failed. The statement
// "--pause" prints its line and waits for a line on stdin (a scenario kills a
// server meanwhile).
//
//	goclient -remote sc://127.0.0.1:15003/ "select 1" "select count(*) from range(10)"
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/apache/spark-connect-go/spark/sql"
)

type result struct {
	SQL   string `json:"sql"`
	Rows  int    `json:"rows"`
	First []any  `json:"first,omitempty"`
	Error string `json:"error,omitempty"`
	Secs  float64 `json:"secs"`
}

func main() {
	remote := flag.String("remote", "sc://127.0.0.1:15002", "Spark Connect address")
	flag.Parse()
	ctx := context.Background()
	spark, err := sql.NewSessionBuilder().Remote(*remote).Build(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "goclient: cannot build a session: %v\n", err)
		os.Exit(2)
	}
	defer spark.Stop()
	failed := false
	out := json.NewEncoder(os.Stdout)
	stdin := bufio.NewReader(os.Stdin)
	for _, q := range flag.Args() {
		r := result{SQL: q}
		if q == "--pause" {
			_ = out.Encode(r)
			_, _ = stdin.ReadString('\n')
			continue
		}
		start := time.Now()
		df, err := spark.Sql(ctx, q)
		if err == nil {
			rows, cerr := df.Collect(ctx)
			err = cerr
			r.Rows = len(rows)
			if len(rows) > 0 {
				r.First = rows[0].Values()
			}
		}
		r.Secs = time.Since(start).Seconds()
		if err != nil {
			r.Error = err.Error()
			failed = true
		}
		_ = out.Encode(r)
	}
	if failed {
		os.Exit(1)
	}
}
