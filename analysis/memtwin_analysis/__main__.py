"""python3 -m memtwin_analysis report INPUT --out report.html [--png-dir DIR]"""
import argparse
import sys

from .report import write_report


def main(argv=None):
    parser = argparse.ArgumentParser(prog="memtwin report",
                                     description="A self-contained HTML report for a run directory "
                                                 "(memtwin run --out DIR), a result JSON file, a sweep directory, a plan, "
                                                 "or a validation (memtwin validate --out DIR).")
    sub = parser.add_subparsers(dest="command", required=True)
    report = sub.add_parser("report")
    report.add_argument("input")
    report.add_argument("--out", required=True)
    report.add_argument("--png-dir", help="also write each figure as a PNG here")
    args = parser.parse_args(argv)
    try:
        shown = write_report(args.input, args.out, args.png_dir)
    except (OSError, ValueError, KeyError) as e:
        print(f"memtwin report: {e}", file=sys.stderr)
        return 2
    print(f"{args.out}: {len(shown)} figures ({', '.join(shown)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
