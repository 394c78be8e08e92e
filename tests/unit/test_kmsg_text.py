"""kernel_log_clean's reason shows a /dev/kmsg record as dmesg would: [seconds] message."""

from bench.judge.retention import kmsg_text


def test_a_kmsg_record_reads_as_seconds_and_message():
    rec = "11,3039,75548472608,-;bench tests: Buffer I/O error on dev bench-test\n"
    assert kmsg_text(rec) == "[75548.472608] bench tests: Buffer I/O error on dev bench-test"
    assert kmsg_text("3,7,5,c,caller=T1;x;y") == "[0.000005] x;y"


def test_other_lines_stay_as_they_are():
    for line in ("<3>[   12.5] Buffer I/O error on dev vda", "a,b,c;Buffer I/O", ";", ""):
        assert kmsg_text(line) == line.strip()
