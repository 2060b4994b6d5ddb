# fio with the psync engine, with and without --thread (without it, every
# job is a forked process).  Verify runs (verify=crc32c) are compared by
# pass/fail only; the others by the bytes each job moved and its error code.
. "$PROG_DIR/common.sh"
summary() {
	python3 -c '
import json, sys
text = sys.stdin.read()
doc = json.loads(text[text.index("{"):])
for j in doc["jobs"]:
    verify = "verify" in sys.argv[1:]
    moved = "" if verify else " read=%d write=%d" % (j["read"]["io_bytes"], j["write"]["io_bytes"])
    print("job %s error=%d%s" % (j["jobname"], j["error"], moved))
' "$@"
}
common=(--ioengine=psync --bs=4k --size=8m --output-format=json --randrepeat=1)
for thread in --thread ""; do
	step "fio ${thread:-forked jobs}"
	fio --name=write-verify --directory=. --filename=vdata --rw=randwrite --verify=crc32c --do_verify=1 \
		"${common[@]}" $thread | summary verify
	echo "exit $?"
	fio --name=seqwrite --directory=. --filename=sdata --rw=write "${common[@]}" $thread | summary
	fio --name=randread --directory=. --filename=sdata --rw=randread "${common[@]}" $thread | summary
	fio --name=mixed --directory=. --rw=randrw --rwmixread=50 --numjobs=2 --group_reporting=0 \
		--fsync=16 "${common[@]}" $thread | summary verify
	fio --name=pverify --directory=. --filename=vdata --rw=read --verify=crc32c --verify_only \
		"${common[@]}" $thread | summary verify
	stat -c '%n %s' vdata sdata mixed.*
	rm -f vdata sdata mixed.*
done
